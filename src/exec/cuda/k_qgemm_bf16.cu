// The dequantizing tensor-core GEMM over K-quant blocks (k_qgemm.h, QgemmBf16Params). A block
// of 8 warps owns kRows = 128 weight rows (16 a warp) and 8 NT input columns (NT = 2, 4 or 8
// column tiles, a template parameter, so a tile's shared loads and MMAs issue without
// branches), over the steps (super-blocks of 256 values) of its K split. Per step:
//   - a ring slot receives by cp.async the input's 256 values of each column (one staging a
//     block: its 128 rows share it) and the step's bytes of each of the block's rows (Q6_K: the
//     16-byte aligned 224-byte window around its 210-byte block, which needs 16-byte aligned
//     rows, K % 2,048 == 0; otherwise each lane loads its bytes into registers a step ahead);
//     the ring is 2-4 slots deep, as many as leave two blocks an SM;
//   - Q4_K / Q5_K: the block decodes the step's 8 scales and mins of each row once, into a
//     table after the ring (4 KB: a bf16 pair a sub-block and row), then a barrier; otherwise
//     each of the 4 lanes sharing a row decodes them itself, ~180 of a warp's ~575
//     instructions a step at 16 columns (the kernel is issue-bound): 1-6% faster on Q4_K
//     (H100, session 27), not taken where it would leave one block an SM (uses_table);
//   - each lane reads its rows g and g + 8's bytes of the step from the slot (K4Lane /
//     Q6kLane::load_shared), turns each 4-code word into two bf16 pairs -- 0x4300 | code is
//     128 + code exactly, minus 128 + zero is the code minus the format's zero, exactly -- and
//     one bf16x2 FMA / multiply applies the sub-block's scale (and Q4_K / Q5_K's min);
//   - the 16 k16 tiles of the step (the lane's values 4t..4t+3 of a 16-value run as the MMA's
//     slots 2t, 2t + 1, 2t + 8, 2t + 9, and the input read at the same positions: one 8-byte
//     shared load a column tile) run against the block's NT column tiles.
// A decoded A fragment serves NT MMAs, so the decode's ~14 instructions a tile matter at small
// M only, where the weights' bytes bound the kernel anyway. Staging the weights keeps 1-3 steps
// of them in flight an SM without registers: loading them into registers (one step ahead, all
// 128 registers spent) lost on every 8B shape at M = 16-64 (session 26, bench/RESULTS.md).
//
// Shared memory a slot: 8 NT columns x 544 bytes (a column's 512 bytes padded by 32, so the 16
// lanes of a half-warp -- 4 columns x 4 offsets 8 bytes apart -- hit distinct banks), then 128
// rows x 144 / 176 / 240 bytes (Q4_K / Q5_K / Q6_K; 36 / 44 / 60 words a row: lanes g = 0..7 on
// distinct banks). After the ring, Q4_K / Q5_K's scale table.
//
// Split-K: where ceil(M / 64) x ceil(N / 128) blocks leave SMs idle (N = 4,096: 32 blocks), the
// grid's z splits the steps; each split stores f32 partial sums, and a second launch adds them
// in split order.
#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_cp_async.cuh"
#include "exec/cuda/k_mma.cuh"
#include "exec/cuda/k_qgemm.h"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_qgemv_common.cuh"

namespace keel::cuda {

namespace {

using namespace qgemv_detail;
using async_copy::cp_async16;
using async_copy::cp_async_commit;
using async_copy::cp_async_wait;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
static_assert(kThreads == 2 * 16 * kWarps, "a scale table row a pair of threads (fill_table)");
constexpr int kCols = 64;                  // columns a block owns, at most (8 column tiles)
constexpr int kRows = 16 * kWarps;         // weight rows a block owns
constexpr int kStep = 256;                 // values a step: one super-block
constexpr int kColBytes = 2 * kStep + 32;  // a staged column, padded (see the top)
constexpr int kStages = 3;                 // ring slots of the input alone
// The most shared memory a variant takes: Q6_K, 8 column tiles, weights staged, two slots.
constexpr std::size_t kSmemMost = 2 * (8 * 8 * kColBytes + kRows * 240);
constexpr int kMaxSplits = 16;
// Split counts are bounded for devices of up to this many SMs (qgemm_bf16_workspace_bytes).
constexpr int kMaxSms = 256;

std::int64_t grid_blocks(int M, std::int64_t N) {
  return std::int64_t((M + kCols - 1) / kCols) * ((N + kRows - 1) / kRows);
}
// Enough splits for two blocks an SM, at least two steps a split.
int wanted_splits(int M, std::int64_t N, std::int64_t K, int num_sms) {
  const std::int64_t blocks = grid_blocks(M, N), steps = K / kStep;
  std::int64_t s = (2 * std::int64_t(num_sms) + blocks - 1) / blocks;
  s = std::min<std::int64_t>({s, kMaxSplits, std::max<std::int64_t>(1, steps / 2)});
  return static_cast<int>(std::max<std::int64_t>(1, s));
}

__device__ __forceinline__ unsigned bits_of(__nv_bfloat162 v) {
  return *reinterpret_cast<const unsigned *>(&v);
}
__device__ __forceinline__ __nv_bfloat162 bf162_of(unsigned u) {
  return *reinterpret_cast<const __nv_bfloat162 *>(&u);
}
// Bytes 0, 1 (p01) and 2, 3 (p23) of `codes` (each < 128) as bf16 pairs minus `off` (128 + the
// format's zero): exact small integers.
__device__ __forceinline__ void codes_to_bf16(unsigned codes, __nv_bfloat162 off,
                                              __nv_bfloat162 &p01, __nv_bfloat162 &p23) {
  p01 = __hsub2(bf162_of(__byte_perm(codes, 0x43434343u, 0x4140)), off);
  p23 = __hsub2(bf162_of(__byte_perm(codes, 0x43434343u, 0x4342)), off);
}

// The step's input, staged: column c's values at x + c * kColBytes. Adds the products of a k16
// tile at `base` (A words a) into the block's NT column tiles (a compile-time count: no branch
// between the shared loads and the MMAs, so they issue back to back).
template <int NT>
__device__ __forceinline__ void tile_products(const std::uint8_t *x, int base, int g, int t,
                                              const std::uint32_t (&a)[4], float (&acc)[NT][4]) {
  const std::uint8_t *xb = x + g * kColBytes + (base + 4 * t) * 2;
  uint2 b[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) b[nt] = *reinterpret_cast<const uint2 *>(xb + nt * 8 * kColBytes);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) mma_bf16(acc[nt], a, b[nt].x, b[nt].y);
}

template <QuantFormat F>
struct Bf16Fmt;

// Q4_K / Q5_K: value = d sc q - dmin m per 32-value sub-block.
template <bool kQ5>
struct Bf16K4 {
  using Raw = K4Lane<kQ5>;
  static constexpr int kBytes = Raw::kBytes;
  // Staged weights: a row's step is its own 16-byte aligned block.
  static constexpr int kWindow = kBytes, kWStride = kBytes;
  __device__ static std::size_t window_start(int s) { return std::size_t(s) * kBytes; }
  __device__ static int window_offset(int /*s*/) { return 0; }
  // The step's scales and mins, decoded once a block instead of by each of the 4 lanes that
  // share a row: row r's sub-block j as the bf16 pair (d sc, -dmin m) at table[8 r + j]. Thread
  // i decodes row i % 128's sub-blocks 4 (i / 128)..+3 (a warp's sub-blocks alike: no branch
  // apart) from the staged head; `rows` = the slot's staged weights.
  static constexpr bool kTable = true;
  static constexpr int kTableBytes = kRows * 8 * 4;
  __device__ static void fill_table(const std::uint8_t *rows, std::uint32_t *table, int i) {
    const int row = i % kRows, j0 = 4 * (i / kRows);
    const uint4 head = *reinterpret_cast<const uint4 *>(rows + row * kWStride);
    const float d = f16_bits(head.x), dmin = f16_bits(head.x >> 16);
    std::uint32_t e[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      int sc, mn;
      k_scale_min(head, j0 + q, sc, mn);
      e[q] = bits_of(
          __floats2bfloat162_rn(d * static_cast<float>(sc), -dmin * static_cast<float>(mn)));
    }
    *reinterpret_cast<uint4 *>(table + 8 * row + j0) = make_uint4(e[0], e[1], e[2], e[3]);
  }
  // kFromTable: pairs[h][j] is row g + 8h's table entry for sub-block j; else each lane decodes
  // its rows' scales from the heads itself (the same values).
  template <int NT, bool kFromTable>
  __device__ static void compute(const Raw &r, const std::uint32_t (&pairs)[2][8],
                                 const std::uint8_t *x, int g, int t, float (&acc)[NT][4]) {
    const __nv_bfloat162 off = __float2bfloat162_rn(128.0f);
    float d[2], dmin[2];
    if constexpr (!kFromTable) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        d[h] = f16_bits(r.head[h].x);
        dmin[h] = f16_bits(r.head[h].x >> 16);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        __nv_bfloat162 s2[2], m2[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if constexpr (kFromTable) {
            const std::uint32_t e = pairs[h][2 * i + hi];
            s2[h] = bf162_of(__byte_perm(e, 0, 0x1010));
            m2[h] = bf162_of(__byte_perm(e, 0, 0x3232));
          } else {
            int sc, mn;
            k_scale_min(r.head[h], 2 * i + hi, sc, mn);
            s2[h] = __float2bfloat162_rn(d[h] * static_cast<float>(sc));
            m2[h] = __float2bfloat162_rn(-dmin[h] * static_cast<float>(mn));
          }
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          std::uint32_t a[4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            __nv_bfloat162 p01, p23;
            codes_to_bf16(r.codes(h, i, k, hi), off, p01, p23);
            a[h] = bits_of(__hfma2(p01, s2[h], m2[h]));
            a[2 + h] = bits_of(__hfma2(p23, s2[h], m2[h]));
          }
          tile_products<NT>(x, 64 * i + 32 * hi + 16 * k, g, t, a, acc);
        }
      }
  }
};
template <>
struct Bf16Fmt<QuantFormat::kQ4_K> : Bf16K4<false> {};
template <>
struct Bf16Fmt<QuantFormat::kQ5_K> : Bf16K4<true> {};

// Q6_K: value = d sc (q - 32) per 16-value run, one run a k16 tile.
template <>
struct Bf16Fmt<QuantFormat::kQ6_K> {
  using Raw = Q6kLane;
  static constexpr int kBytes = 210;
  static constexpr bool kTable = false;  // its scales: one byte each, decoded where used
  static constexpr int kTableBytes = 0;
  // Staged weights (rows 16-byte aligned: K a multiple of 2,048): the 16-byte aligned window of
  // 224 bytes around a block (it starts 2s % 16 bytes in, and ends at or before the row's end),
  // rows 240 bytes apart in shared memory (60 words: lanes g = 0..7 on distinct banks).
  static constexpr int kWindow = 224, kWStride = 240;
  __device__ static std::size_t window_start(int s) {
    return std::size_t(s) * kBytes & ~std::size_t(15);
  }
  __device__ static int window_offset(int s) { return (s * kBytes) & 15; }
  template <int NT, bool kFromTable>
  __device__ static void compute(const Raw &r, const std::uint32_t (&)[2][8], const std::uint8_t *x,
                                 int g, int t, float (&acc)[NT][4]) {
    static_assert(!kFromTable);
    const __nv_bfloat162 off = __float2bfloat162_rn(160.0f);
    const float dh[2] = {f16_bits(r.d[0]), f16_bits(r.d[1])};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int rr = 0; rr < 4; ++rr)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          std::uint32_t a[4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const __nv_bfloat162 s2 =
                __float2bfloat162_rn(dh[h] * static_cast<float>(r.scale(h, n, rr, hh)));
            __nv_bfloat162 p01, p23;
            codes_to_bf16(r.ucodes(h, n, rr, hh), off, p01, p23);
            a[h] = bits_of(__hmul2(p01, s2));
            a[2 + h] = bits_of(__hmul2(p23, s2));
          }
          tile_products<NT>(x, 128 * n + 32 * rr + 16 * hh, g, t, a, acc);
        }
  }
};

bool weights_stageable(QuantFormat f, std::int64_t K);

// Shared memory a ring slot: the input's columns, then (kStagedW) the block's weight rows.
template <QuantFormat F, int NT, bool kStagedW>
constexpr int slot_bytes() {
  return 8 * NT * kColBytes + (kStagedW ? kRows * Bf16Fmt<F>::kWStride : 0);
}
// Ring slots: as many as fit two blocks an SM (~110 KB each), 2..4; 3 for the input alone.
template <QuantFormat F, int NT, bool kStagedW>
constexpr int ring_slots() {
  if (!kStagedW) return kStages;
  const int fit = 110 * 1024 / slot_bytes<F, NT, kStagedW>();
  return fit < 2 ? 2 : fit > 4 ? 4 : fit;
}

// Whether the block decodes the step's scales into a table (Q4_K / Q5_K, weights staged): only
// where ring and table still leave two blocks an SM (<= 112 KB). Q5_K at 8 column tiles (two
// 57 KB slots) would fit one: it ran 8-11% slower with the table (H100, session 27), so it
// decodes its scales a lane at a time, as before.
template <QuantFormat F, int NT, bool kStagedW>
constexpr bool uses_table() {
  return kStagedW && Bf16Fmt<F>::kTable &&
         ring_slots<F, NT, kStagedW>() * slot_bytes<F, NT, kStagedW>() + Bf16Fmt<F>::kTableBytes <=
             112 * 1024;
}

// Grid: x = 64-column blocks (fastest: the blocks sharing weight rows run together), y =
// 128-row blocks, z = K splits of steps_per_split steps. `partials`: null, or f32 [splits][M][N].
// kStagedW: the weights too go through the ring by cp.async (deep copies in flight without
// registers), each lane reading its bytes from shared memory; else each lane loads its bytes of
// the next step into registers during this step's math.
template <QuantFormat F, int NT, bool kStagedW>
__global__ void __launch_bounds__(kThreads, 2)
    qgemm_bf16_kernel(const QgemmBf16Params p, int steps_per_split, float *partials) {
  using T = Bf16Fmt<F>;
  constexpr int cols = 8 * NT;
  constexpr int kSlots = ring_slots<F, NT, kStagedW>();
  extern __shared__ uint4 smem_raw[];
  auto *smem = reinterpret_cast<std::uint8_t *>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int steps = static_cast<int>(p.K / kStep);
  const int s0 = blockIdx.z * steps_per_split, n = min(steps, s0 + steps_per_split) - s0;
  const int m0 = blockIdx.x * kCols;
  const int mcols = min(p.M - m0, cols);
  const std::int64_t row0 = std::int64_t(blockIdx.y) * kRows + warp * 16 + g;
  const std::size_t row_bytes = static_cast<std::size_t>(steps) * T::kBytes;
  const auto *w = static_cast<const std::uint8_t *>(p.w);
  // Rows past N read row 0 (their outputs are never stored).
  const std::uint8_t *const rows[2] = {
      w + static_cast<std::size_t>(row0 < p.N ? row0 : 0) * row_bytes,
      w + static_cast<std::size_t>(row0 + 8 < p.N ? row0 + 8 : 0) * row_bytes};
  const std::int64_t ldx = p.ldx > 0 ? p.ldx : p.K;
  constexpr int stage_bytes = slot_bytes<F, NT, kStagedW>();
  const std::int64_t block_row0 = std::int64_t(blockIdx.y) * kRows;
  // Step s's values of the block's columns into ring slot `buf`; columns past M are zeros.
  // kStagedW: then the step's window of each of the block's rows (rows past N: row 0's).
  auto stage = [&](int s, int buf) {
    std::uint8_t *dst = smem + buf * stage_bytes;
    const bf16 *src = p.x + std::int64_t(m0) * ldx + std::int64_t(s) * kStep;
    for (int i = threadIdx.x; i < cols * 32; i += kThreads) {
      const int c = i / 32, j = i % 32;
      if (c < mcols)
        cp_async16(dst + c * kColBytes + 16 * j, src + c * ldx + 8 * j);
      else
        *reinterpret_cast<uint4 *>(dst + c * kColBytes + 16 * j) = make_uint4(0, 0, 0, 0);
    }
    if constexpr (kStagedW) {
      constexpr int kChunks = T::kWindow / 16;
      std::uint8_t *wd = dst + cols * kColBytes;
      const std::size_t at = T::window_start(s);
      for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
        const int rr = i / kChunks, c = i % kChunks;
        const std::int64_t row = block_row0 + rr < p.N ? block_row0 + rr : 0;
        cp_async16(wd + rr * T::kWStride + 16 * c, w + std::size_t(row) * row_bytes + at + 16 * c);
      }
    }
  };
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  }
  // One commit group a ring slot, empty past the split's last step, so wait<kSlots - 2>
  // always means "step i has landed".
#pragma unroll
  for (int k = 0; k < kSlots - 1; ++k) {
    if (k < n) stage(s0 + k, k);
    cp_async_commit();
  }
  // Staged weights: read from the slot before the step's math (and, kTable, the step's scales
  // decoded into the table after the ring: the barrier at the top of the next step keeps it
  // until every warp is done with it). Else: loaded into registers, the next step's during this
  // step's math.
  constexpr bool kTable = uses_table<F, NT, kStagedW>();
  auto *table = reinterpret_cast<std::uint32_t *>(smem + kSlots * stage_bytes);
  typename T::Raw cur, nxt;
  if constexpr (!kStagedW) cur.load(rows, s0, t);
  for (int i = 0; i < n; ++i) {
    cp_async_wait<kSlots - 2>();
    __syncthreads();  // step i staged by every thread; slot (i - 1) % kSlots read by all
    if (i + kSlots - 1 < n) stage(s0 + i + kSlots - 1, (i + kSlots - 1) % kSlots);
    cp_async_commit();
    const std::uint8_t *slot = smem + (i % kSlots) * stage_bytes;
    if constexpr (kStagedW) {
      const std::uint8_t *wr = slot + cols * kColBytes + T::window_offset(s0 + i);
      if constexpr (kTable) {
        T::fill_table(wr, table, threadIdx.x);
        __syncthreads();
      }
      const std::uint8_t *const srows[2] = {wr + (warp * 16 + g) * T::kWStride,
                                            wr + (warp * 16 + g + 8) * T::kWStride};
      cur.load_shared(srows, t);
    } else if (i + 1 < n) {
      nxt.load(rows, s0 + i + 1, t);
    }
    std::uint32_t pairs[2][8] = {};  // the rows' table entries (kTable)
    if constexpr (kTable) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 *e = reinterpret_cast<const uint4 *>(table + 8 * (warp * 16 + g + 8 * h));
        const uint4 a = e[0], b = e[1];
        const std::uint32_t v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) pairs[h][j] = v[j];
      }
    }
    T::template compute<NT, kTable>(cur, pairs, slot, g, t, acc);
    if constexpr (!kStagedW)
      if (i + 1 < n) cur = nxt;
  }
  const std::int64_t ldy = p.ldy > 0 ? p.ldy : p.N;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const std::int64_t row = row0 + 8 * h;
        const int m = m0 + nt * 8 + 2 * t + e;
        if (row >= p.N || m >= p.M) continue;
        const float v = acc[nt][2 * h + e];
        if (partials)
          partials[(std::int64_t(blockIdx.z) * p.M + m) * p.N + row] = v;
        else if (p.y_f32)
          static_cast<float *>(p.y)[std::int64_t(m) * ldy + row] = v;
        else
          static_cast<bf16 *>(p.y)[std::int64_t(m) * ldy + row] = __float2bfloat16(v);
      }
  }
}

// y = the splits' partial sums added in split order.
__global__ void qgemm_bf16_reduce_kernel(const float *partials, int splits, int M, std::int64_t N,
                                         void *y, std::int64_t ldy, bool y_f32) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= std::int64_t(M) * N) return;
  const std::int64_t m = i / N, row = i % N, plane = std::int64_t(M) * N;
  float v = 0.0f;
  for (int z = 0; z < splits; ++z) v += partials[z * plane + i];
  if (y_f32)
    static_cast<float *>(y)[m * ldy + row] = v;
  else
    static_cast<bf16 *>(y)[m * ldy + row] = __float2bfloat16(v);
}

template <QuantFormat F, int NT, bool kStagedW>
void launch_fns(cudaStream_t s, const QgemmBf16Params &p, int splits, int steps_per_split,
                float *partials) {
  const auto kernel = qgemm_bf16_kernel<F, NT, kStagedW>;
  constexpr int smem = ring_slots<F, NT, kStagedW>() * slot_bytes<F, NT, kStagedW>() +
                       (uses_table<F, NT, kStagedW>() ? Bf16Fmt<F>::kTableBytes : 0);
  // The same value for every launch, so two engines' threads never race over the attribute.
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.M + kCols - 1) / kCols),
                  static_cast<unsigned>((p.N + kRows - 1) / kRows), static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, smem, s>>>(p, steps_per_split, partials);
}

// Weights staged through shared memory where the rows allow it: always for Q4_K / Q5_K, for
// Q6_K where K is a multiple of 2,048. Loading them into registers instead lost on every 8B
// shape at M = 16 / 32 / 64 (H100, session 26: e.g. the q4_k LM head 158 / 195 / 283 us staged
// against 204 / 253 / 367), so only Q6_K's other widths keep that path.
template <QuantFormat F, int NT>
void launch_fn(cudaStream_t s, const QgemmBf16Params &p, int splits, int steps_per_split,
               float *partials) {
  if constexpr (F == QuantFormat::kQ6_K) {
    if (!weights_stageable(F, p.K))
      return launch_fns<F, NT, false>(s, p, splits, steps_per_split, partials);
  }
  launch_fns<F, NT, true>(s, p, splits, steps_per_split, partials);
}

// Column tiles a block: the fewest of 2, 4, 8 that covers M (64 columns past 32 rows).
template <QuantFormat F>
void launch_f(cudaStream_t s, const QgemmBf16Params &p, int splits, int steps_per_split,
              float *partials) {
  if (p.M <= 16) return launch_fn<F, 2>(s, p, splits, steps_per_split, partials);
  if (p.M <= 32) return launch_fn<F, 4>(s, p, splits, steps_per_split, partials);
  launch_fn<F, 8>(s, p, splits, steps_per_split, partials);
}

bool weights_stageable(QuantFormat f, std::int64_t K) {
  return f != QuantFormat::kQ6_K || K % 2048 == 0;
}

bool k_quant(QuantFormat f) {
  return f == QuantFormat::kQ4_K || f == QuantFormat::kQ5_K || f == QuantFormat::kQ6_K;
}

}  // namespace

bool qgemm_bf16_supported(QuantFormat f, int M, std::int64_t K) {
  return k_quant(f) && M >= 1 && M <= 65535 && K > 0 && K % kStep == 0 &&
         K <= (std::int64_t(1) << 24) && kSmemMost <= qgemv_device_smem();
}

std::size_t qgemm_bf16_workspace_bytes(int M, std::int64_t N) {
  // wanted_splits' most on any device of up to kMaxSms SMs, for any K.
  const std::int64_t blocks = grid_blocks(M, N);
  const std::int64_t s =
      std::min<std::int64_t>(kMaxSplits, (2 * std::int64_t(kMaxSms) + blocks - 1) / blocks);
  return s > 1 ? static_cast<std::size_t>(s * M * N) * sizeof(float) : 0;
}

void launch_qgemm_bf16(StreamRef s_ref, const QgemmBf16Params &p, int num_sms) {
  const cudaStream_t s = s_ref.get("launch_qgemm_bf16");
  if (p.N <= 0 || p.M <= 0) return;
  const std::int64_t ldx = p.ldx > 0 ? p.ldx : p.K;
  auto misaligned = [](const void *q) { return reinterpret_cast<std::uintptr_t>(q) % 16 != 0; };
  if (!qgemm_bf16_supported(p.format, p.M, p.K) || ldx < p.K || ldx % 8 != 0 ||
      (p.ldy > 0 && p.ldy < p.N) || !p.w || !p.x || !p.y || misaligned(p.w) || misaligned(p.x) ||
      (p.workspace && misaligned(p.workspace)) || p.splits < 0 || (p.N + kRows - 1) / kRows > 65535)
    throw Error(ErrorCode::kInvalidArgument,
                "qgemm_bf16: unsupported shape M=" + std::to_string(p.M) +
                    " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K));
  if (num_sms <= 0) {
    int device = 0;
    KEEL_CUDA_CHECK(cudaGetDevice(&device));
    KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  }
  const int steps = static_cast<int>(p.K / kStep);
  int splits = p.splits > 0 ? std::min(p.splits, steps) : wanted_splits(p.M, p.N, p.K, num_sms);
  const std::size_t plane = static_cast<std::size_t>(p.M) * p.N * sizeof(float);
  if (!p.workspace) splits = 1;
  while (splits > 1 && std::size_t(splits) * plane > p.workspace_bytes) --splits;
  const int per = (steps + splits - 1) / splits;
  splits = (steps + per - 1) / per;  // no empty split
  float *partials = splits > 1 ? static_cast<float *>(p.workspace) : nullptr;
  switch (p.format) {
    case QuantFormat::kQ4_K:
      launch_f<QuantFormat::kQ4_K>(s, p, splits, per, partials);
      break;
    case QuantFormat::kQ5_K:
      launch_f<QuantFormat::kQ5_K>(s, p, splits, per, partials);
      break;
    case QuantFormat::kQ6_K:
      launch_f<QuantFormat::kQ6_K>(s, p, splits, per, partials);
      break;
    default:  // rejected above
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("qgemm_bf16");
  if (!partials) return;
  const std::int64_t total = std::int64_t(p.M) * p.N;
  constexpr int kReduceThreads = 256;
  qgemm_bf16_reduce_kernel<<<static_cast<unsigned>((total + kReduceThreads - 1) / kReduceThreads),
                             kReduceThreads, 0, s>>>(partials, splits, p.M, p.N, p.y,
                                                     p.ldy > 0 ? p.ldy : p.N, p.y_f32);
  KEEL_CUDA_CHECK_LAUNCH("qgemm_bf16_reduce");
}

}  // namespace keel::cuda
