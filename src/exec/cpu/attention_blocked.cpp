#include "exec/cpu/attention_blocked.h"

#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KEEL_ATTN_X86 1
#include <immintrin.h>
#define KEEL_ATTN_AVX512 __attribute__((target("avx2,fma,avx512f")))
#endif

namespace keel::cpu {

namespace {

constexpr std::int64_t kKeyBlock = 64;  // keys per block: four 16-float vectors
constexpr std::int64_t kTileRows = 64;  // query rows (tokens x group heads) per tile, about
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One tile's working set, carved from a thread's scratch vector.
struct Tile {
  float *qs;  // [M, D] queries of the tile, pre-scaled
  float *o;   // [M, D] unnormalised output
  float *kt;  // [D, kKeyBlock] the key block, transposed
  float *v;   // [kKeyBlock, D] the value block
  float *s;   // [M, kKeyBlock] scores, then probabilities
  float *m;   // [M] running max
  float *l;   // [M] running sum
};

// ---------------------------------------------------------------- portable family
struct Portable {
  // s[r, j] = qs[r, :] . kt[:, j]
  static void scores(const float *qs, const float *kt, float *s, std::int64_t M, std::int64_t D) {
    for (std::int64_t r = 0; r < M; ++r) {
      float *sr = s + r * kKeyBlock;
      std::fill(sr, sr + kKeyBlock, 0.0f);
      for (std::int64_t d = 0; d < D; ++d) {
        const float a = qs[r * D + d];
        const float *k = kt + d * kKeyBlock;
        for (std::int64_t j = 0; j < kKeyBlock; ++j) sr[j] += a * k[j];
      }
    }
  }
  // o[r, :] += sum_j p[r, j] v[j, :]
  static void accumulate(const float *p, const float *v, float *o, std::int64_t M, std::int64_t D) {
    for (std::int64_t r = 0; r < M; ++r) {
      float *orow = o + r * D;
      for (std::int64_t j = 0; j < kKeyBlock; ++j) {
        const float w = p[r * kKeyBlock + j];
        const float *vr = v + j * D;
        for (std::int64_t d = 0; d < D; ++d) orow[d] += w * vr[d];
      }
    }
  }
  // x[j] = exp(x[j] - mx) for one row of kKeyBlock (x <= mx; -inf gives 0); returns the sum.
  static float exp_row(float *x, float mx) {
    float sum = 0;
    for (std::int64_t j = 0; j < kKeyBlock; ++j) sum += (x[j] = std::exp(x[j] - mx));
    return sum;
  }
};

#ifdef KEEL_ATTN_X86
// ---------------------------------------------------------------- AVX-512 family
struct Avx512 {
  // exp(x) for x <= 0: reduction to |r| <= ln2/2 and a degree-6 polynomial (relative error
  // about 1e-7), scaled by 2^k through the exponent bits; x below -86 (and -inf) gives
  // exactly 0. (Written without max / roundscale / scalef, whose GCC 12 headers warn.)
  KEEL_ATTN_AVX512 static __m512 exp_nonpos(__m512 x) {
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-86.0f), _CMP_LT_OQ);
    x = _mm512_mask_mov_ps(x, tiny, _mm512_set1_ps(-86.0f));
    const __m512 shifter = _mm512_set1_ps(0x1.8p23f);  // adding it rounds to an integer
    const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), shifter);
    const __m512 k = _mm512_sub_ps(t, shifter);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145752f), x);  // ln2 in two parts
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    // k (>= -125) sits in t's low mantissa bits: add it to p's exponent (p in [0.7, 1.5]).
    const __m512i ki = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(shifter));
    const __m512 e = _mm512_castsi512_ps(_mm512_add_epi32(
        _mm512_castps_si512(p), _mm512_mullo_epi32(ki, _mm512_set1_epi32(1 << 23))));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), e);
  }

  // Four rows x 64 keys per register tile: 16 accumulators, each K vector loaded once
  // for four rows.
  KEEL_ATTN_AVX512 static void scores(const float *qs, const float *kt, float *s, std::int64_t M,
                                      std::int64_t D) {
    std::int64_t r = 0;
    for (; r + 4 <= M; r += 4) {
      __m512 acc[4][4];
      for (auto &row : acc)
        for (auto &a : row) a = _mm512_setzero_ps();
      for (std::int64_t d = 0; d < D; ++d) {
        const float *k = kt + d * kKeyBlock;
        const __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16),
                     k2 = _mm512_loadu_ps(k + 32), k3 = _mm512_loadu_ps(k + 48);
        for (int i = 0; i < 4; ++i) {
          const __m512 a = _mm512_set1_ps(qs[(r + i) * D + d]);
          acc[i][0] = _mm512_fmadd_ps(a, k0, acc[i][0]);
          acc[i][1] = _mm512_fmadd_ps(a, k1, acc[i][1]);
          acc[i][2] = _mm512_fmadd_ps(a, k2, acc[i][2]);
          acc[i][3] = _mm512_fmadd_ps(a, k3, acc[i][3]);
        }
      }
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(s + (r + i) * kKeyBlock + 16 * c, acc[i][c]);
    }
    for (; r < M; ++r) {
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
      for (std::int64_t d = 0; d < D; ++d) {
        const __m512 a = _mm512_set1_ps(qs[r * D + d]);
        for (int c = 0; c < 4; ++c)
          acc[c] = _mm512_fmadd_ps(a, _mm512_loadu_ps(kt + d * kKeyBlock + 16 * c), acc[c]);
      }
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(s + r * kKeyBlock + 16 * c, acc[c]);
    }
  }

  // Four rows x 16 * NV output columns per register tile.
  template <int NV>
  KEEL_ATTN_AVX512 static void accumulate_cols(const float *p, const float *v, float *o,
                                               std::int64_t M, std::int64_t D, std::int64_t d0) {
    std::int64_t r = 0;
    for (; r + 4 <= M; r += 4) {
      __m512 acc[4][NV];
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < NV; ++c) acc[i][c] = _mm512_loadu_ps(o + (r + i) * D + d0 + 16 * c);
      for (std::int64_t j = 0; j < kKeyBlock; ++j) {
        __m512 vv[NV];
        for (int c = 0; c < NV; ++c) vv[c] = _mm512_loadu_ps(v + j * D + d0 + 16 * c);
        for (int i = 0; i < 4; ++i) {
          const __m512 w = _mm512_set1_ps(p[(r + i) * kKeyBlock + j]);
          for (int c = 0; c < NV; ++c) acc[i][c] = _mm512_fmadd_ps(w, vv[c], acc[i][c]);
        }
      }
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + (r + i) * D + d0 + 16 * c, acc[i][c]);
    }
    for (; r < M; ++r) {
      __m512 acc[NV];
      for (int c = 0; c < NV; ++c) acc[c] = _mm512_loadu_ps(o + r * D + d0 + 16 * c);
      for (std::int64_t j = 0; j < kKeyBlock; ++j) {
        const __m512 w = _mm512_set1_ps(p[r * kKeyBlock + j]);
        for (int c = 0; c < NV; ++c)
          acc[c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(v + j * D + d0 + 16 * c), acc[c]);
      }
      for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + r * D + d0 + 16 * c, acc[c]);
    }
  }
  // Needs D % 16 == 0 (checked by the caller).
  KEEL_ATTN_AVX512 static void accumulate(const float *p, const float *v, float *o, std::int64_t M,
                                          std::int64_t D) {
    std::int64_t d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) accumulate_cols<4>(p, v, o, M, D, d0);
    for (; d0 < D; d0 += 16) accumulate_cols<1>(p, v, o, M, D, d0);
  }

  KEEL_ATTN_AVX512 static float exp_row(float *x, float mx) {
    const __m512 m = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (std::int64_t j = 0; j < kKeyBlock; j += 16) {
      const __m512 e = exp_nonpos(_mm512_sub_ps(_mm512_loadu_ps(x + j), m));
      _mm512_storeu_ps(x + j, e);
      sum = _mm512_add_ps(sum, e);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    float total = 0;
    for (const float x : lanes) total += x;
    return total;
  }
};
#endif

struct TaskShape {
  std::int64_t H, D, group, rows_per_tile;  // rows_per_tile: tokens per tile
};

// One tile: tokens [t0, t0 + n) at positions p0 .. p0 + n - 1 of one sequence, query
// heads h0 .. h0 + nh - 1 of KV head g's group. Row r is token r / nh, head h0 + r % nh.
template <class F>
void run_tile(const float *q, float *out, const std::int32_t *table, std::int64_t t0,
              std::int64_t n, std::int64_t p0, std::int64_t g, std::int64_t h0, std::int64_t nh,
              const CpuKvStore &kv, std::int64_t layer, const AttentionShape &shape,
              const TaskShape &ts, Tile &tl) {
  const std::int64_t D = ts.D, H = ts.H, group = nh, M = n * nh;
  const std::int32_t bs = kv.block_size();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t hh = 0; hh < group; ++hh) {
      const float *src = q + ((t0 + i) * H + g * ts.group + h0 + hh) * D;
      float *dst = tl.qs + (i * group + hh) * D;
      for (std::int64_t d = 0; d < D; ++d) dst[d] = src[d] * shape.scale;
    }
  std::fill(tl.o, tl.o + M * D, 0.0f);
  if (shape.sinks) {
    // A sink is a key of logit sinks[h] and no value: it starts the running max and sum.
    for (std::int64_t r = 0; r < M; ++r) {
      tl.m[r] = shape.sinks[g * ts.group + h0 + r % group];
      tl.l[r] = 1.0f;  // exp(sink - sink)
    }
  } else {
    std::fill(tl.m, tl.m + M, kNegInf);
    std::fill(tl.l, tl.l + M, 0.0f);
  }
  auto lo_of = [&](std::int64_t p) {
    return shape.window > 0 ? std::max<std::int64_t>(0, p - shape.window + 1) : 0;
  };
  const std::int64_t p_last = p0 + n - 1;
  for (std::int64_t j0 = lo_of(p0) / kKeyBlock * kKeyBlock; j0 <= p_last; j0 += kKeyBlock) {
    const std::int64_t nk = std::min(kKeyBlock, p_last + 1 - j0);
    for (std::int64_t j = 0; j < nk; ++j) {
      const std::int64_t pos = j0 + j;
      const auto slot = static_cast<std::int32_t>(pos % bs);
      const float *kr = kv.row(table[pos / bs], layer, 0, slot) + g * D;
      const float *vr = kv.row(table[pos / bs], layer, 1, slot) + g * D;
      for (std::int64_t d = 0; d < D; ++d) tl.kt[d * kKeyBlock + j] = kr[d];
      std::copy(vr, vr + D, tl.v + j * D);
    }
    for (std::int64_t j = nk; j < kKeyBlock; ++j) {  // padding: finite, masked below
      for (std::int64_t d = 0; d < D; ++d) tl.kt[d * kKeyBlock + j] = 0.0f;
      std::fill(tl.v + j * D, tl.v + (j + 1) * D, 0.0f);
    }
    F::scores(tl.qs, tl.kt, tl.s, M, D);
    for (std::int64_t r = 0; r < M; ++r) {
      const std::int64_t p = p0 + r / group;
      const std::int64_t a = std::max(lo_of(p), j0) - j0, b = std::min(p, j0 + nk - 1) - j0;
      float *sr = tl.s + r * kKeyBlock;
      if (a > b) {  // no key of this block is visible to this row
        std::fill(sr, sr + kKeyBlock, 0.0f);
        continue;
      }
      std::fill(sr, sr + a, kNegInf);
      std::fill(sr + b + 1, sr + kKeyBlock, kNegInf);
      float mx = tl.m[r];
      for (std::int64_t j = a; j <= b; ++j) mx = std::max(mx, sr[j]);
      const float corr = std::exp(tl.m[r] - mx);  // 0 on the first visible block
      const float sum = F::exp_row(sr, mx);
      tl.l[r] = tl.l[r] * corr + sum;
      tl.m[r] = mx;
      if (corr != 1.0f) {
        float *orow = tl.o + r * D;
        for (std::int64_t d = 0; d < D; ++d) orow[d] *= corr;
      }
    }
    F::accumulate(tl.s, tl.v, tl.o, M, D);
  }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t hh = 0; hh < group; ++hh) {
      const std::int64_t r = i * group + hh;
      const float inv = 1.0f / tl.l[r];
      float *dst = out + ((t0 + i) * H + g * ts.group + h0 + hh) * D;
      for (std::int64_t d = 0; d < D; ++d) dst[d] = tl.o[r * D + d] * inv;
    }
}

struct TileTask {
  std::int32_t seq, g;
  std::int64_t first, n;  // tokens [first, first + n) of the sequence's chunk
  std::int32_t h0, nh;    // heads h0 .. h0 + nh - 1 of the group
};

template <class F>
void run_all(const float *q, float *out, const ForwardBatch &batch,
             const std::vector<TileTask> &tasks, const CpuKvStore &kv, std::int64_t layer,
             const AttentionShape &shape, const TaskShape &ts, ThreadPool &pool,
             std::vector<std::vector<float>> &scratch) {
  const std::int64_t D = ts.D, M = ts.rows_per_tile * ts.group;
  const std::int64_t need = 2 * M * D + 2 * kKeyBlock * D + M * kKeyBlock + 2 * M;
  pool.run_chunks(static_cast<int>(tasks.size()), [&](int c, int slot) {
    auto &buf = scratch[slot];
    if (static_cast<std::int64_t>(buf.size()) < need) buf.resize(need);
    float *b = buf.data();
    Tile tl{b,
            b + M * D,
            b + 2 * M * D,
            b + 2 * M * D + kKeyBlock * D,
            b + 2 * M * D + 2 * kKeyBlock * D,
            b + 2 * M * D + 2 * kKeyBlock * D + M * kKeyBlock,
            b + 2 * M * D + 2 * kKeyBlock * D + M * kKeyBlock + M};
    const TileTask &task = tasks[c];
    const SequenceSlice &s = batch.seqs[task.seq];
    run_tile<F>(q, out, batch.block_table.data() + s.block_offset, s.token_offset + task.first,
                task.n, s.start_pos + task.first, task.g, task.h0, task.nh, kv, layer, shape, ts,
                tl);
  });
}

}  // namespace

void blocked_attention(const float *q, float *out, const ForwardBatch &batch,
                       const std::vector<std::int32_t> &seqs, const CpuKvStore &kv,
                       std::int64_t layer, const AttentionShape &shape, ThreadPool &pool,
                       std::vector<std::vector<float>> &thread_scratch) {
  const std::int64_t group = shape.heads / shape.kv_heads;
  const TaskShape ts{shape.heads, shape.head_dim, group,
                     std::max<std::int64_t>(1, kTileRows / group)};
  // Long chunks: tiles of rows_per_tile tokens x the whole group, the ones near the end
  // of a sequence (most keys) first so that cheap ones fill in at the end. Decode and
  // short chunks: one token x the group, or x one head when that leaves threads idle.
  // Rows never mix, so the tiling does not change any result.
  std::int64_t short_tokens = 0;
  for (const std::int32_t si : seqs)
    if (batch.seqs[si].num_tokens < kBlockedMinTokens) short_tokens += batch.seqs[si].num_tokens;
  const bool split_heads = short_tokens * shape.kv_heads < 2 * pool.size();
  std::vector<TileTask> tasks;
  for (const std::int32_t si : seqs) {
    const std::int64_t n = batch.seqs[si].num_tokens;
    const std::int64_t rows = n >= kBlockedMinTokens ? ts.rows_per_tile : 1;
    const bool per_head = n < kBlockedMinTokens && split_heads;
    for (std::int64_t first = (n - 1) / rows * rows; first >= 0; first -= rows)
      for (std::int64_t g = 0; g < shape.kv_heads; ++g)
        for (std::int64_t h0 = 0; h0 < group; h0 += per_head ? 1 : group)
          tasks.push_back({si, static_cast<std::int32_t>(g), first, std::min(rows, n - first),
                           static_cast<std::int32_t>(h0),
                           static_cast<std::int32_t>(per_head ? 1 : group)});
  }
  if (tasks.empty()) return;
  if (static_cast<int>(thread_scratch.size()) < pool.size()) thread_scratch.resize(pool.size());
#ifdef KEEL_ATTN_X86
  if (shape.head_dim % 16 == 0 && __builtin_cpu_supports("avx512f")) {
    run_all<Avx512>(q, out, batch, tasks, kv, layer, shape, ts, pool, thread_scratch);
    return;
  }
#endif
  run_all<Portable>(q, out, batch, tasks, kv, layer, shape, ts, pool, thread_scratch);
}

}  // namespace keel::cpu
