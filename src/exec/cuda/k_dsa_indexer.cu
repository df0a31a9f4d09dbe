// DeepSeek Sparse Attention's indexer kernels (k_dsa_indexer.h).
//
// dsa_scores_kernel (fp32 on CUDA cores: the shapes that k_dsa_scores_mma.cu's tensor-core
// kernel does not take, and the comparisons): grid (ctas_per_row, rows), a row's keys [0, p]
// split evenly over its blocks. A block stages q_idx[t] (roped) and the scaled weights in
// shared memory, then chunks of kKeyChunk index keys (bf16 -> f32); each warp scores 4 keys at
// a time with one head per lane (q rows padded by 4 floats: float4 loads of 32 heads fall in
// distinct banks, the key's float4 is a broadcast), relu-weights them and sums the heads over
// the warp.
//
// dsa_topk_kernel: one block per row. The scores' bits as ordered unsigned keys (larger
// float, larger key; -0 as +0 so that zero scores tie as on the CPU), then four 8-bit radix
// passes find the topk-th largest key K and how many of the keys equal to K are taken;
// keys above K go out through a shared counter, keys equal to K in position order (a block
// scan per chunk) until enough are taken: the CPU's "ties to the earlier position".
#include <algorithm>
#include <string>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_dsa_indexer.h"
#include "exec/cuda/k_dsa_scores_keys.cuh"
#include "exec/cuda/k_dsa_scores_mma.h"
#include "exec/cuda/k_mla_rope.cuh"
#include "exec/cuda/k_reduce.cuh"

namespace keel::cuda {

namespace {

using reduce::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyChunk = 4 * kWarps;  // keys staged per step: 4 a warp
constexpr int kTopkThreads = 1024;
constexpr int kMaxDi = 1024;

// The rotation of rope pair i at position pos from x into y (the latent row's table and
// style, k_mla_rope.cuh).
__device__ void rope_rotate(int i, int rope, float pos, const MlaRope &rp, const float *x,
                            float *y) {
  int a, b;
  mla_detail::rope_index(i, rope, rp.interleaved, a, b);
  mla_detail::rope_pair(i, pos, rp, x[a], x[b], y[a], y[b]);
}

__global__ void dsa_tokens_kernel(const AttnTile *tiles, int num_tiles, DsaToken *tokens) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_tiles) return;
  const AttnTile tile = tiles[i];
  for (int j = 0; j < tile.num_q; ++j) {
    DsaToken d;
    d.pos = tile.pos0 + j;
    d.block_offset = tile.block_offset;
    tokens[tile.q_start + j] = d;
  }
}

// One block per token: LayerNorm, then rope, into the row's index key.
__global__ void __launch_bounds__(kThreads)
    dsa_key_write_kernel(const float *k, int k_stride, int Di, const float *ln,
                         const std::int32_t *positions, MlaRope rp, int rope,
                         const std::int32_t *slots, bf16 *cache, KvLayout layout, int layer,
                         int key_at) {
  __shared__ float red[kWarps];
  __shared__ float normed[kMaxDi];
  const int t = blockIdx.x;
  const std::int32_t slot = slots[t];
  if (slot < 0) return;  // padding row (uniform over the block)
  const float *x = k + std::int64_t(t) * k_stride;
  float s = 0;
  for (int i = threadIdx.x; i < Di; i += kThreads) s += x[i];
  const float mean = reduce::block_sum<kThreads>(s, red) / static_cast<float>(Di);
  float v = 0;
  for (int i = threadIdx.x; i < Di; i += kThreads) v += (x[i] - mean) * (x[i] - mean);
  const float inv = rsqrtf(reduce::block_sum<kThreads>(v, red) / static_cast<float>(Di) + 1e-6f);
  for (int i = threadIdx.x; i < Di; i += kThreads)
    normed[i] = (x[i] - mean) * inv * ln[i] + ln[Di + i];
  __syncthreads();
  bf16 *row =
      cache + layout.offset(slot / layout.block_size, layer, 0, slot % layout.block_size) + key_at;
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < rope / 2; i += kThreads) {
    int a, b;
    mla_detail::rope_index(i, rope, rp.interleaved, a, b);
    float y1, y2;
    mla_detail::rope_pair(i, pos, rp, normed[a], normed[b], y1, y2);
    row[a] = __float2bfloat16(y1);
    row[b] = __float2bfloat16(y2);
  }

  for (int i = rope + threadIdx.x; i < Di; i += kThreads) row[i] = __float2bfloat16(normed[i]);
}

__host__ __device__ int q_pitch(int Di) { return Di + 4; }

__global__ void __launch_bounds__(kThreads) dsa_scores_kernel(DsaScoreParams p) {
  extern __shared__ float4 smem4[];
  float *qs = reinterpret_cast<float *>(smem4);  // [Hi][Di + 4] roped q
  float *ks = qs + p.Hi * q_pitch(p.Di);         // [kKeyChunk][Di] keys
  float *ws = ks + kKeyChunk * p.Di;             // [Hi] weights * Hi^-1/2
  int t, k_begin, k_end;
  DsaToken tok;
  if (!dsa_detail::scores_block_keys(p, kKeyChunk, t, tok, k_begin, k_end)) return;

  const int Hi = p.Hi, Di = p.Di, pitch = q_pitch(Di);
  const float *q = p.q + std::int64_t(t) * Hi * Di;
  const float pos = static_cast<float>(tok.pos);
  for (int i = threadIdx.x; i < Hi * Di; i += kThreads) {
    const int h = i / Di, d = i % Di;
    if (d >= p.rope) qs[h * pitch + d] = q[i];
  }
  for (int i = threadIdx.x; i < Hi * (p.rope / 2); i += kThreads) {
    const int h = i / (p.rope / 2), j = i % (p.rope / 2);
    rope_rotate(j, p.rope, pos, p.rp, q + h * Di, qs + h * pitch);
  }
  const float wscale = 1.0f / sqrtf(static_cast<float>(Hi));
  for (int h = threadIdx.x; h < Hi; h += kThreads)
    ws[h] = p.w[std::int64_t(t) * p.w_stride + h] * wscale;
  const float scale = 1.0f / sqrtf(static_cast<float>(Di));
  const int bs = p.layout.block_size, vecs = Di / 8;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float *row_scores = p.scores + std::int64_t(blockIdx.y) * p.stride;

  // Each thread's share of a chunk's 16-byte key vectors, loaded one chunk ahead into
  // registers so that the table -> key loads overlap the previous chunk's arithmetic.
  constexpr int kMaxLoads = 4;  // kKeyChunk * (Di / 8) / kThreads for Di <= 256
  const int loads = (kKeyChunk * vecs + kThreads - 1) / kThreads;
  uint4 raw[kMaxLoads];
  auto load_chunk = [&](int c0) {
#pragma unroll
    for (int l = 0; l < kMaxLoads; ++l) {
      const int i = threadIdx.x + l * kThreads;
      raw[l] = make_uint4(0, 0, 0, 0);
      if (l >= loads || i >= kKeyChunk * vecs) continue;
      const int key = c0 + i / vecs, v = i % vecs;
      if (key < k_end) {
        const std::int32_t block = p.block_table[tok.block_offset + key / bs];
        raw[l] = *reinterpret_cast<const uint4 *>(
            p.cache + p.layout.offset(block, p.layer, 0, key % bs) + p.key_at + v * 8);
      }
    }
  };
  load_chunk(k_begin);
  for (int c0 = k_begin; c0 < k_end; c0 += kKeyChunk) {
    __syncthreads();  // qs / ws staged; ks free again
#pragma unroll
    for (int l = 0; l < kMaxLoads; ++l) {
      const int i = threadIdx.x + l * kThreads;
      if (l >= loads || i >= kKeyChunk * vecs) continue;
      float *dst = ks + (i / vecs) * Di + (i % vecs) * 8;
      const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&raw[l]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // zeros past k_end: those keys are not written out
        const float2 f = __bfloat1622float2(h2[e]);
        dst[2 * e] = f.x;
        dst[2 * e + 1] = f.y;
      }
    }
    if (c0 + kKeyChunk < k_end) load_chunk(c0 + kKeyChunk);
    __syncthreads();
    float s[4] = {0, 0, 0, 0};
    const float *kw = ks + (warp * 4) * Di;
    for (int h = lane; h < Hi; h += 32) {
      float a[4] = {0, 0, 0, 0};
      const float *qh = qs + h * pitch;
      for (int d = 0; d < Di; d += 4) {
        const float4 qv = *reinterpret_cast<const float4 *>(qh + d);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float4 kv = *reinterpret_cast<const float4 *>(kw + j * Di + d);
          a[j] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) s[j] += ws[h] * fmaxf(a[j] * scale, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float v = warp_sum(s[j]);
      const int key = c0 + warp * 4 + j;
      if (lane == 0 && key < k_end) row_scores[key] = v;
    }
  }
}

// Larger float, larger key; -0 and +0 the same key (the CPU compares them equal).
__device__ unsigned order_key(float f) {
  unsigned b = __float_as_uint(f);
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The whole row in one block (four 8-bit radix passes over the row, then the ties in position
// order): the fallback for a threshold bucket too full for the candidate list (many exact ties).
__device__ void topk_whole_row(const float *sc, int n, int topk, std::int32_t *out) {
  __shared__ unsigned hist[256];
  __shared__ unsigned s_digit;
  __shared__ int s_want, s_out;
  __shared__ int warp_count[kTopkThreads / 32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // The topk-th largest key, 8 bits at a time from the top; `want`: how many of the keys
  // matching the prefix so far are still to be taken.
  unsigned prefix = 0, mask = 0;
  int want = topk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kTopkThreads) {
      const unsigned k = order_key(sc[i]);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, d = 255;
      for (; d > 0; --d) {
        if (above + static_cast<int>(hist[d]) >= want) break;
        above += static_cast<int>(hist[d]);
      }
      s_digit = static_cast<unsigned>(d);
      s_want = want - above;
      s_out = 0;
    }
    __syncthreads();
    prefix |= s_digit << shift;
    mask |= 255u << shift;
    want = s_want;
  }
  // prefix is the threshold key K: topk - want keys above it, then the first `want` equal.
  for (int i = tid; i < n; i += kTopkThreads)
    if (order_key(sc[i]) > prefix) out[atomicAdd(&s_out, 1)] = i;
  const int first_equal = topk - want;
  int taken = 0;  // equal keys seen before this chunk (uniform over the block)
  for (int c0 = 0; c0 < n && taken < want; c0 += kTopkThreads) {
    const int i = c0 + tid;
    const bool eq = i < n && order_key(sc[i]) == prefix;
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    __syncthreads();  // warp_count may still be read by the previous chunk
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kTopkThreads / 32; ++w) {
      before += w < warp ? warp_count[w] : 0;
      total += warp_count[w];
    }
    const int rank = taken + before + __popc(ballot & ((1u << lane) - 1u));
    if (eq && rank < want) out[first_equal + rank] = i;
    taken += total;
  }
}

// Multi-block top-k. hist: every block of a row adds its slice's keys to the row's global
// histogram of the top kBinBits bits; collect: every block finds the threshold bucket B (the
// one holding the topk-th largest key) from it, writes its keys above B to sel and its keys in
// B to the row's candidate list as (low key bits << 32 | ~position) (distinct, larger is
// better: the earlier position wins a tie); final: one block per row selects the
// topk - above best candidates by a radix select over those 53 bits, or, if B held more than
// kMaxCand keys, runs topk_whole_row. Per row a header of kBins + 4 u32 (the histogram, the
// above and candidate counters), zeroed per call, then kMaxCand u64 candidates.
constexpr int kBinBits = 12, kBins = 1 << kBinBits, kBinShift = 32 - kBinBits;
constexpr int kHdr = kBins + 4;
constexpr int kMaxCand = 16384;
constexpr int kSelThreads = 256;

struct Slice {
  int begin, end;
};

// Block x of the row's gridDim.x blocks: an even share of [0, n).
__device__ Slice row_slice(int n) {
  const int per = (n + gridDim.x - 1) / gridDim.x;
  const int b = blockIdx.x * per;
  return {b, min(n, b + per)};
}

// The lane of a warp holding the crossing writes what it found; bins counted from the top.
// Each of the NT threads sums kBins / NT bins, a block scan gives the counts above them, and
// the one thread whose range holds the topk-th key walks it. res: bucket, keys above it, keys
// in it.
template <int NT>
__device__ void find_threshold(const unsigned *hist, int topk, int *res, unsigned *wsum) {
  constexpr int per = kBins / NT;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int hi = kBins - tid * per;  // this thread: bins [hi - per, hi)
  unsigned local = 0;
  for (int i = 1; i <= per; ++i) local += hist[hi - i];
  unsigned incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) wsum[warp] = incl;
  __syncthreads();
  for (int w = 0; w < warp; ++w) incl += wsum[w];
  const unsigned excl = incl - local, want = static_cast<unsigned>(topk);
  if (excl < want && incl >= want) {
    unsigned above = excl;
    for (int i = 1; i <= per; ++i) {
      const unsigned c = hist[hi - i];
      if (above + c >= want) {
        res[0] = hi - i;
        res[1] = static_cast<int>(above);
        res[2] = static_cast<int>(c);
        break;
      }
      above += c;
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kSelThreads)
    dsa_topk_hist_kernel(const float *scores, std::int64_t stride, const DsaToken *tokens, int T,
                         int t0, int rows, int topk, unsigned *headers) {
  __shared__ unsigned h[kBins];
  const int r = blockIdx.y, t = t0 + r;
  if (r >= rows || t >= T) return;
  const int n = tokens[t].pos + 1;
  if (n <= topk) return;
  const Slice sl = row_slice(n);
  if (sl.begin >= sl.end) return;
  for (int i = threadIdx.x; i < kBins; i += kSelThreads) h[i] = 0;
  __syncthreads();
  const float *sc = scores + std::int64_t(r) * stride;
  for (int i = sl.begin + threadIdx.x; i < sl.end; i += kSelThreads)
    atomicAdd(&h[order_key(sc[i]) >> kBinShift], 1u);
  __syncthreads();
  unsigned *g = headers + std::int64_t(r) * kHdr;
  for (int i = threadIdx.x; i < kBins; i += kSelThreads)
    if (h[i] != 0) atomicAdd(&g[i], h[i]);
}

// A warp-aggregated append: the lanes with `on` get consecutive slots from *counter.
__device__ unsigned append_slot(bool on, unsigned *counter) {
  const unsigned ballot = __ballot_sync(0xffffffffu, on);
  const int lane = threadIdx.x % 32, leader = __ffs(ballot) - 1;
  unsigned base = 0;
  if (ballot != 0 && lane == leader)
    base = atomicAdd(counter, static_cast<unsigned>(__popc(ballot)));
  base = __shfl_sync(0xffffffffu, base, ballot != 0 ? leader : 0);
  return base + __popc(ballot & ((1u << lane) - 1u));
}

__global__ void __launch_bounds__(kSelThreads)
    dsa_topk_collect_kernel(const float *scores, std::int64_t stride, const DsaToken *tokens, int T,
                            int t0, int rows, int topk, unsigned *headers,
                            unsigned long long *cands, std::int32_t *sel) {
  __shared__ unsigned wsum[kSelThreads / 32];
  __shared__ int res[3];
  const int r = blockIdx.y, t = t0 + r;
  if (r >= rows || t >= T) return;
  const int n = tokens[t].pos + 1;
  if (n <= topk) return;
  const Slice sl = row_slice(n);
  if (sl.begin >= sl.end) return;
  unsigned *hdr = headers + std::int64_t(r) * kHdr;
  find_threshold<kSelThreads>(hdr, topk, res, wsum);
  const unsigned B = static_cast<unsigned>(res[0]);
  const bool keep = res[2] <= kMaxCand;  // else final reads the whole row
  const float *sc = scores + std::int64_t(r) * stride;
  std::int32_t *out = sel + std::int64_t(t) * topk;
  unsigned long long *cand = cands + std::int64_t(r) * kMaxCand;
  // Whole warps per step (the appends are ballots).
  for (int base = sl.begin; base < sl.end; base += kSelThreads) {
    const int i = base + threadIdx.x;
    const bool valid = i < sl.end;
    const unsigned key = valid ? order_key(sc[i]) : 0u;
    const unsigned bin = key >> kBinShift;
    const bool above = valid && bin > B;
    const unsigned a = append_slot(above, &hdr[kBins]);
    if (above) out[a] = i;
    if (keep) {
      const bool in = valid && bin == B;
      const unsigned c = append_slot(in, &hdr[kBins + 1]);
      if (in)
        cand[c] = (static_cast<unsigned long long>(key & ((1u << kBinShift) - 1u)) << 32) |
                  (0xffffffffu - static_cast<unsigned>(i));
    }
  }
}

// Warp 0 of the block: the digit d (from 255 down) where the keys counted in hist[d..255]
// first reach `want`; res: d, want less the keys above d.
__device__ void find_digit(const unsigned *hist, int want, int *res) {
  const int lane = threadIdx.x % 32;
  const int hi = 256 - lane * 8;  // bins [hi - 8, hi)
  int local = 0;
  for (int i = 1; i <= 8; ++i) local += static_cast<int>(hist[hi - i]);
  int incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  const int excl = incl - local;
  if (excl < want && incl >= want) {
    int above = excl;
    for (int i = 1; i <= 8; ++i) {
      const int c = static_cast<int>(hist[hi - i]);
      if (above + c >= want) {
        res[0] = hi - i;
        res[1] = want - above;
        break;
      }
      above += c;
    }
  }
}

__global__ void __launch_bounds__(kTopkThreads)
    dsa_topk_final_kernel(const float *scores, std::int64_t stride, const DsaToken *tokens, int T,
                          int t0, int rows, int topk, const unsigned *headers,
                          const unsigned long long *cands, std::int32_t *sel) {
  __shared__ unsigned wsum[kTopkThreads / 32];
  __shared__ int res[3];
  __shared__ unsigned hist[256];
  __shared__ int dres[2];
  __shared__ unsigned s_out;
  const int r = blockIdx.x, t = t0 + r;
  if (r >= rows || t >= T) return;
  const int n = tokens[t].pos + 1;
  if (n <= topk) return;
  const unsigned *hdr = headers + std::int64_t(r) * kHdr;
  std::int32_t *out = sel + std::int64_t(t) * topk;
  find_threshold<kTopkThreads>(hdr, topk, res, wsum);
  const int above = res[1], count = res[2];
  if (count > kMaxCand) {
    topk_whole_row(scores + std::int64_t(r) * stride, n, topk, out);
    return;
  }
  const unsigned long long *cand = cands + std::int64_t(r) * kMaxCand;
  const int tid = threadIdx.x;
  // The want-th largest of the distinct 53-bit candidates, 8 bits at a time from the top.
  unsigned long long prefix = 0, mask = 0;
  int want = topk - above;
  for (int shift = 48; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
    if (tid == 0) s_out = 0;
    __syncthreads();
    for (int i = tid; i < count; i += kTopkThreads) {
      const unsigned long long c = cand[i];
      if ((c & mask) == prefix) atomicAdd(&hist[(c >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid < 32) find_digit(hist, want, dres);
    __syncthreads();
    prefix |= static_cast<unsigned long long>(dres[0]) << shift;
    mask |= 255ull << shift;
    want = dres[1];
    __syncthreads();  // dres read by all before the next pass writes it
  }
  // prefix is the candidate ranked topk - above: it and every larger one are kept.
  for (int i = tid; i < count; i += kTopkThreads) {
    const unsigned long long c = cand[i];
    if (c >= prefix)
      out[above + static_cast<int>(atomicAdd(&s_out, 1u))] =
          static_cast<std::int32_t>(0xffffffffu - static_cast<unsigned>(c & 0xffffffffu));
  }
}

}  // namespace

std::size_t dsa_scores_smem(int Hi, int Di) {
  return (static_cast<std::size_t>(Hi) * q_pitch(Di) + static_cast<std::size_t>(kKeyChunk) * Di +
          Hi) *
         sizeof(float);
}

void launch_dsa_tokens(StreamRef s_ref, const AttnTile *tiles, int num_tiles, DsaToken *tokens) {
  const cudaStream_t s = s_ref.get("launch_dsa_tokens");
  if (num_tiles <= 0) return;
  dsa_tokens_kernel<<<(num_tiles + 127) / 128, 128, 0, s>>>(tiles, num_tiles, tokens);
  KEEL_CUDA_CHECK_LAUNCH("dsa_tokens");
}

void launch_dsa_key_write(StreamRef s_ref, const float *k, int T, int k_stride, int Di,
                          const float *ln, const std::int32_t *positions, const MlaRope &rp,
                          int rope, const std::int32_t *slots, bf16 *cache, const KvLayout &layout,
                          int layer, int key_at) {
  const cudaStream_t s = s_ref.get("launch_dsa_key_write");
  if (layout.planes != 1 || Di <= 0 || Di > kMaxDi || rope % 2 != 0 || rope > Di ||
      key_at + Di > layout.slot_elems() || k_stride < Di || layer < 0 || layer >= layout.num_layers)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_dsa_key_write: index key of " + std::to_string(Di) + " values at " +
                    std::to_string(key_at) + " of a " + std::to_string(layout.slot_elems()) +
                    "-value latent row (rope " + std::to_string(rope) + ")");
  if (T <= 0) return;
  dsa_key_write_kernel<<<T, kThreads, 0, s>>>(k, k_stride, Di, ln, positions, rp, rope, slots,
                                              cache, layout, layer, key_at);
  KEEL_CUDA_CHECK_LAUNCH("dsa_key_write");
}

bool dsa_scores_uses_mma(const DsaScoreParams &p) {
  return p.mma && dsa_scores_mma_supported(p.Hi, p.Di, p.rope);
}

int dsa_scores_ctas_per_row(const DsaScoreParams &p, int max_keys, int num_sms) {
  const int rows = std::max(p.rows, 1);
  if (!dsa_scores_uses_mma(p))  // ~3 blocks a SM (80 registers), chunks of 32 keys
    return std::clamp((3 * num_sms + rows - 1) / rows, 1, std::max(1, (max_keys + 31) / 32));
  // One wave of the blocks that are resident at once, rounded down (a block more a row would
  // start a second wave that runs alone), at least a 32-key tile for each of a block's 4 warps.
  const int resident = kDsaScoresMmaBlocksPerSm * num_sms;
  return std::clamp(resident / rows, 1, std::max(1, (max_keys + 127) / 128));
}

void launch_dsa_scores(StreamRef s_ref, const DsaScoreParams &p) {
  const cudaStream_t s = s_ref.get("launch_dsa_scores");
  const bool mma = dsa_scores_uses_mma(p);
  const std::size_t smem =
      mma ? dsa_scores_mma_smem(p.Hi, p.Di, p.rope) : dsa_scores_smem(p.Hi, p.Di);
  if (p.layout.planes != 1 || p.Hi <= 0 || p.Di <= 0 || p.Di % 8 != 0 || p.rope < 0 ||
      p.rope % 2 != 0 || p.rope > p.Di || p.key_at % 8 != 0 || p.layout.slot_elems() % 8 != 0 ||
      p.key_at + p.Di > p.layout.slot_elems() || p.topk <= 0 || p.ctas_per_row <= 0 ||
      (!mma && (p.Di > 256 || smem > 48 * 1024)) || p.rows > 65535)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_dsa_scores: bad shape (Hi " + std::to_string(p.Hi) + ", Di " +
                    std::to_string(p.Di) + ", rope " + std::to_string(p.rope) + ", key at " +
                    std::to_string(p.key_at) + " of " + std::to_string(p.layout.slot_elems()) +
                    ", " + std::to_string(smem) + " bytes of shared memory)");
  if (p.rows <= 0) return;
  if (mma) {
    launch_dsa_scores_mma(s, p);
    return;
  }
  dsa_scores_kernel<<<dim3(p.ctas_per_row, p.rows), kThreads, smem, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("dsa_scores");
}

std::size_t dsa_topk_scratch_bytes(int rows) {
  return static_cast<std::size_t>(rows) *
         (kHdr * sizeof(unsigned) + kMaxCand * sizeof(unsigned long long));
}

void launch_dsa_topk(StreamRef s_ref, const float *scores, std::int64_t stride,
                     const DsaToken *tokens, int T, int t0, int rows, int topk, std::int32_t *sel,
                     void *scratch, int scratch_rows) {
  const cudaStream_t s = s_ref.get("launch_dsa_topk");
  if (topk <= 0 || stride <= 0 || scratch == nullptr || scratch_rows <= 0 || rows > 65535)
    throw Error(ErrorCode::kInvalidArgument, "launch_dsa_topk: topk " + std::to_string(topk) +
                                                 ", scratch rows " + std::to_string(scratch_rows));
  if (rows <= 0) return;
  int dev = 0, sms = 0;
  KEEL_CUDA_CHECK(cudaGetDevice(&dev));
  KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  auto *headers = static_cast<unsigned *>(scratch);
  auto *cands = reinterpret_cast<unsigned long long *>(static_cast<char *>(scratch) +
                                                       static_cast<std::size_t>(scratch_rows) *
                                                           kHdr * sizeof(unsigned));
  // Passes of at most scratch_rows rows; a row's keys over enough blocks for ~2 waves
  // (the slices are cut at run time from each row's position, so the grid depends on rows).
  for (int q0 = 0; q0 < rows; q0 += scratch_rows) {
    const int n = std::min(scratch_rows, rows - q0);
    const float *sc = scores + std::int64_t(q0) * stride;
    const int per_row = std::clamp((2 * sms + n - 1) / n, 1, 1024);
    KEEL_CUDA_CHECK(
        cudaMemsetAsync(headers, 0, static_cast<std::size_t>(n) * kHdr * sizeof(unsigned), s));
    dsa_topk_hist_kernel<<<dim3(per_row, n), kSelThreads, 0, s>>>(sc, stride, tokens, T, t0 + q0, n,
                                                                  topk, headers);
    KEEL_CUDA_CHECK_LAUNCH("dsa_topk_hist");
    dsa_topk_collect_kernel<<<dim3(per_row, n), kSelThreads, 0, s>>>(sc, stride, tokens, T, t0 + q0,
                                                                     n, topk, headers, cands, sel);
    KEEL_CUDA_CHECK_LAUNCH("dsa_topk_collect");
    dsa_topk_final_kernel<<<n, kTopkThreads, 0, s>>>(sc, stride, tokens, T, t0 + q0, n, topk,
                                                     headers, cands, sel);
    KEEL_CUDA_CHECK_LAUNCH("dsa_topk_final");
  }
}

}  // namespace keel::cuda
