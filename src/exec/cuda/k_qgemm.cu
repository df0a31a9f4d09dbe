// Integer tensor-core GEMM over Q8_0 / Q4_0 blocks (k_qgemm.h). A block of 8 warps owns kRows =
// 64 (KG = 2) or 32 (KG = 4) weight rows and 64 input columns: warp w computes the 16-row tile
// w % (8 / KG) for every column tile of the block, over the runs of 8 blocks -- "steps" of 256
// values -- c KG + w / (8 / KG) of each chunk c; the KG groups' sums meet through shared memory
// at the end, in a fixed order. Per step a lane loads its two rows' (g, g + 8) bytes for the step
// into registers (the tensor-core GEMV's fragments, k_qgemv_mma.cu, but every code at 4t and
// 16 + 4t of a 32-value run: the staged input has one layout, the permuted one), unpacks each
// block's codes once and runs them against up to 8 column tiles. K-quants take the dequantizing
// bf16 GEMM (k_qgemm_bf16.cu) instead: their K-quant paths here lost to it on 8B Q4_K_M at every
// width measured (H100 session 27: 2,009 / 4,239 against 2,932 / 7,063 tok/s at 16 / 64 seqs;
// H200 session 26 likewise) and were deleted.
//
// Cost model (H100, 132 SMs, 4 warp instructions a clock an SM): an m16n8k32 is 4,096 MACs,
// and each of its 4 int32 results a lane holds needs a conversion, the scale product and an
// FMA (Q4_0 another for its offset), and the B operand 2 shared loads: ~20 issue
// slots, so ~5 clocks an MMA an SM -- ~350 TOPS, the limit from M ~ 64 on (o_proj at M = 256:
// ~25 us). I2F runs at a quarter rate (16 / clock / SM), so conversions of dots that fit 22
// bits take an integer add and a float subtract instead (small_int_to_float). Memory: a block
// re-reads its weights from L2 for every 64 columns past the first (the blocks that share rows
// are consecutive in the grid, so they run together), and stages 1.25 M K input bytes from L2.
//
// Shared memory: two chunk buffers of 8 KG records of 32 bytes plus a (scale, sum) pair per
// column: 8 KG x cols x 40 bytes each (cols = min(64, M rounded to 8)): 80 KB at KG = 2 and 64
// columns (two blocks an SM: 16 warps), 160 KB at KG = 4 (one block). `__launch_bounds__(256,
// 2)` caps registers at 128: 32 accumulators, the step's raw bytes (24-40 registers), one
// sub-block's A fragment and scales.
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

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kNT = 8;           // column tiles of 8 a warp: 64 columns a block
constexpr int kCols = 8 * kNT;   // columns a block owns
constexpr int kSubs = 8;         // 32-value sub-blocks of a step of 256 values
constexpr int kRecord = 32 + 8;  // staged bytes of a sub-block and column (codes, scale/sum)
constexpr std::size_t kMaxSmem = 200 * 1024;  // as the GEMVs

int padded_m(int M) { return (M + 7) / 8 * 8; }
int block_cols(int M) { return std::min(kCols, padded_m(M)); }
std::size_t smem_bytes(int kg, int cols) {
  const std::size_t stages = 2 * std::size_t(kSubs) * kg * cols * kRecord;
  const std::size_t reduce = std::size_t(kg - 1) * (kWarps / kg) * kNT * 32 * sizeof(float4);
  return std::max(stages, reduce);
}

using async_copy::cp_async16;
using async_copy::cp_async_commit;
using async_copy::cp_async_wait;

// x [M, K] bf16 -> staged [K / 32][Mp][32] int8 (permuted records) + [K / 32][Mp] (d, d x sum
// of codes). Thread j of row blockIdx.y quantizes values 8j..8j+7; 4 consecutive threads make a
// block of 32 (K / 8 is a multiple of 4, so a group is whole or wholly past the row). Rows M..Mp
// are zeros.
__global__ void __launch_bounds__(kThreads)
    qgemm_quantize_kernel(const bf16 *x, std::int64_t ldx, int M, int Mp, int K, std::int8_t *xq,
                          float2 *xds) {
  const int m = blockIdx.y, kv = K / 8;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  const bool ok = j < kv;
  float v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = 0.0f;
  if (ok && m < M) bf16x8_to_float(reinterpret_cast<const uint4 *>(x + m * ldx)[j], v);
  const Q8Lane q8 = quantize_q8_lane(v);  // every lane: it shuffles
  if (!ok) return;
  const int jb = j / 4;
  store_q8_record_part(xq + (static_cast<std::size_t>(jb) * Mp + m) * 32, j % 4, q8, true);
  if (j % 4 == 0)
    xds[static_cast<std::size_t>(jb) * Mp + m] =
        make_float2(q8.d, q8.d * static_cast<float>(q8.isum));
}

// One staged chunk in shared memory: records [8 KG][cols][32] int8, then [8 KG][cols] (d, s).
struct Chunk {
  const std::int8_t *q;
  const float2 *ds;
  int cols;
  // B fragment of sub-block jj, column tile nt: column g's bytes 8t..8t+7 (values 4t..4t+3,
  // 16 + 4t..16 + 4t + 3). The 8 columns of a tile are 256 consecutive bytes: no conflicts.
  __device__ uint2 b(int jj, int nt, int g, int t) const {
    return *reinterpret_cast<const uint2 *>(q + ((jj * cols) + nt * 8 + g) * 32 + 8 * t);
  }
  // (d, s) of columns 2t and 2t + 1 of tile nt: the lane's accumulator columns.
  __device__ float4 ds2(int jj, int nt, int t) const {
    return *reinterpret_cast<const float4 *>(ds + jj * cols + nt * 8 + 2 * t);
  }
};

// Per format: Raw (a lane's bytes of a step for its rows g and g + 8), load, and compute, which
// adds the step's products into acc[nt] = (row g, columns 2t, 2t + 1), (row g + 8, same) for
// the column tiles nt < nts. A registers: a[0] row g values 4t..4t+3, a[1] row g + 8 the same,
// a[2] / a[3] values 16 + 4t.. (k_mma.cuh).
template <QuantFormat F>
struct GemmFmt;

// Q8_0 / Q4_0: 8 blocks a step (34 / 18 bytes, 2-byte aligned); `units` of them are inside K
// (fewer in a last step when K is not a multiple of 256). d as two f16 a word.
template <bool kQ4>
struct GemmQ0 {
  static constexpr int kElems = 32, kBytes = kQ4 ? 18 : 34, kWords = kQ4 ? 1 : 2;
  struct Raw {
    unsigned q[2][8][kWords], d[2][4];
  };
  // units: the row's blocks; a last step past them reads the row's last block again (unused).
  __device__ static void load(Raw &r, const std::uint8_t *const (&rows)[2], int step, int units,
                              int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int k = 0; k < 4; ++k) r.d[h][k] = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int u = min(step * 8 + k, units - 1);
        const std::uint8_t *b = rows[h] + static_cast<std::size_t>(u) * kBytes;
        r.d[h][k / 2] |= ld_u16(b) << (16 * (k % 2));
#pragma unroll
        for (int w = 0; w < kWords; ++w) r.q[h][k][w] = ld_u32_a2(b + 2 + 16 * w + 4 * t);
      }
    }
  }
  __device__ static void compute(const Raw &r, const Chunk &x, int jj0, int g, int t, int nts,
                                 int units, float (&acc)[kNT][4]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (k >= units) break;  // uniform
      std::uint32_t a[4];
      if constexpr (kQ4) {
        a[0] = r.q[0][k][0] & 0x0F0F0F0Fu;
        a[1] = r.q[1][k][0] & 0x0F0F0F0Fu;
        a[2] = (r.q[0][k][0] >> 4) & 0x0F0F0F0Fu;
        a[3] = (r.q[1][k][0] >> 4) & 0x0F0F0F0Fu;
      } else {
        a[0] = r.q[0][k][0];
        a[1] = r.q[1][k][0];
        a[2] = r.q[0][k][1];
        a[3] = r.q[1][k][1];
      }
      const float dh[2] = {f16_bits(r.d[0][k / 2] >> (16 * (k % 2))),
                           f16_bits(r.d[1][k / 2] >> (16 * (k % 2)))};
      const int jj = jj0 + k;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        if (nt >= nts) break;
        const uint2 bx = x.b(jj, nt, g, t);
        int c[4];
        mma_s8_k32(c, a, bx.x, bx.y);
        const float4 xv = x.ds2(jj, nt, t);
        const float xd[2] = {xv.x, xv.z}, xs[2] = {xv.y, xv.w};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float dot = xd[e] * small_int_to_float(c[2 * h + e]);
            acc[nt][2 * h + e] += dh[h] * (kQ4 ? dot - 8.0f * xs[e] : dot);
          }
      }
    }
  }
};
template <>
struct GemmFmt<QuantFormat::kQ8_0> : GemmQ0<false> {};
template <>
struct GemmFmt<QuantFormat::kQ4_0> : GemmQ0<true> {};

// Grid: x = 64-column blocks (fastest, so the blocks sharing weight rows run together and all
// but the first find the rows in L2), y = kRows-row blocks. `cols` = block_cols(M): the
// stride of a chunk's records; Mp = M rounded to 8, the staged input's row count.
template <QuantFormat F, int KG>
__global__ void __launch_bounds__(kThreads, 2) qgemm_kernel(const QgemmParams p, int cols, int Mp) {
  using T = GemmFmt<F>;
  constexpr int kRowTiles = kWarps / KG, kRows = 16 * kRowTiles, kChunkSubs = kSubs * KG;
  extern __shared__ uint4 smem_raw[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int rt = warp % kRowTiles, kg = warp / kRowTiles;
  const int K = static_cast<int>(p.K), kb = K / 32;
  const int units = K / T::kElems, steps = (kb + kSubs - 1) / kSubs;
  const int chunks = (steps + KG - 1) / KG;
  const int m0 = blockIdx.x * kCols;
  const int nts = (min(p.M - m0, kCols) + 7) / 8;  // column tiles this block computes
  const std::int64_t row0 = std::int64_t(blockIdx.y) * kRows + rt * 16 + g;
  const std::size_t row_bytes = static_cast<std::size_t>(units) * T::kBytes;
  const auto *w = static_cast<const std::uint8_t *>(p.w);
  // Rows past N read row 0 (their outputs are never stored).
  const std::uint8_t *const rows[2] = {
      w + static_cast<std::size_t>(row0 < p.N ? row0 : 0) * row_bytes,
      w + static_cast<std::size_t>(row0 + 8 < p.N ? row0 + 8 : 0) * row_bytes};
  const auto *gq = static_cast<const std::int8_t *>(p.staged);
  const auto *gds = reinterpret_cast<const float2 *>(gq + static_cast<std::size_t>(Mp) * K);
  auto *smem = reinterpret_cast<std::int8_t *>(smem_raw);
  const int stage_bytes = kChunkSubs * cols * kRecord;
  auto chunk_at = [&](int buf) {
    const std::int8_t *q = smem + buf * stage_bytes;
    return Chunk{q, reinterpret_cast<const float2 *>(q + kChunkSubs * cols * 32), cols};
  };
  // Chunk c's records of the block's column tiles (columns up to Mp hold zeros) by cp.async.
  auto stage = [&](int c, int buf) {
    const int j0 = c * kChunkSubs, nj = min(kChunkSubs, kb - j0), nc = nts * 8;
    std::int8_t *sq = smem + buf * stage_bytes;
    auto *sds = reinterpret_cast<float2 *>(sq + kChunkSubs * cols * 32);
    for (int i = threadIdx.x; i < nj * nc * 2; i += kThreads) {
      const int jj = i / (nc * 2), mm = i % (nc * 2) / 2, half = i % 2;
      cp_async16(sq + (jj * cols + mm) * 32 + 16 * half,
                 gq + (static_cast<std::size_t>(j0 + jj) * Mp + m0 + mm) * 32 + 16 * half);
    }
    for (int i = threadIdx.x; i < nj * nc / 2; i += kThreads) {
      const int jj = i / (nc / 2), mm = 2 * (i % (nc / 2));
      cp_async16(sds + jj * cols + mm, gds + static_cast<std::size_t>(j0 + jj) * Mp + m0 + mm);
    }
    cp_async_commit();
  };
  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  typename T::Raw raw;
  stage(0, 0);
  for (int c = 0; c < chunks; ++c) {
    const int step = c * KG + kg;
    const bool mine = step < steps;
    // This step's weights go out first: their latency overlaps the wait for the chunk.
    if (mine) T::load(raw, rows, step, units, t);
    if (c + 1 < chunks) {
      stage(c + 1, (c + 1) % 2);  // into the buffer chunk c - 1 left (synced below last time)
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (mine)
      T::compute(raw, chunk_at(c % 2), kSubs * kg, g, t, nts, min(kSubs, kb - step * kSubs), acc);
    __syncthreads();  // chunk c's buffer is restaged by the next iteration
  }
  // Groups 1.. hand their sums to group 0 through shared memory (the chunks are done).
  auto *red = reinterpret_cast<float4 *>(smem_raw);
  auto red_at = [&](int k, int nt) {
    return ((k - 1) * kRowTiles + rt) * kNT * 32 + nt * 32 + lane;
  };
  if constexpr (KG > 1) {
    if (kg > 0)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        if (nt < nts)
          red[red_at(kg, nt)] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
    __syncthreads();
  }
  if (kg != 0) return;
  const std::int64_t ldy = p.ldy > 0 ? p.ldy : p.N;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    if (nt >= nts) break;
    float v[4] = {acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]};
#pragma unroll
    for (int k = 1; k < KG; ++k) {
      const float4 o = red[red_at(k, nt)];
      v[0] += o.x;
      v[1] += o.y;
      v[2] += o.z;
      v[3] += o.w;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const std::int64_t n = row0 + 8 * h;
        const int m = m0 + nt * 8 + 2 * t + e;
        if (n >= p.N || m >= p.M) continue;
        const std::int64_t at = std::int64_t(m) * ldy + n;
        if (p.y_f32)
          static_cast<float *>(p.y)[at] = v[2 * h + e];
        else
          static_cast<bf16 *>(p.y)[at] = __float2bfloat16(v[2 * h + e]);
      }
  }
}

template <QuantFormat F, int KG>
void launch_fk(cudaStream_t s, const QgemmParams &p) {
  const auto kernel = qgemm_kernel<F, KG>;
  const int cols = block_cols(p.M);
  // The same value for every launch on this device, so two engines' threads never race over
  // the attribute.
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(std::min(kMaxSmem, qgemv_device_smem()))));
  constexpr int kRows = 16 * (kWarps / KG);
  const dim3 grid(static_cast<unsigned>((p.M + kCols - 1) / kCols),
                  static_cast<unsigned>((p.N + kRows - 1) / kRows));
  kernel<<<grid, kThreads, smem_bytes(KG, cols), s>>>(p, cols, padded_m(p.M));
}

template <QuantFormat F>
void launch_f(cudaStream_t s, const QgemmParams &p, int kg) {
  if (kg == 4) return launch_fk<F, 4>(s, p);
  launch_fk<F, 2>(s, p);
}

}  // namespace

std::size_t qgemm_input_bytes(int M, std::int64_t K) {
  return static_cast<std::size_t>(padded_m(M)) * static_cast<std::size_t>(K) / 32 * (32 + 8);
}

void launch_qgemm_quantize_input(StreamRef s_ref, const bf16 *x, std::int64_t ldx, int M,
                                 std::int64_t K, void *staged) {
  const cudaStream_t s = s_ref.get("launch_qgemm_quantize_input");
  if (M <= 0) return;
  if (ldx <= 0) ldx = K;
  if (K <= 0 || K % 32 != 0 || ldx < K || ldx % 8 != 0 || !x || !staged ||
      reinterpret_cast<std::uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(staged) % 16 != 0 || padded_m(M) > 65535)
    throw Error(ErrorCode::kInvalidArgument,
                "qgemm: cannot stage M=" + std::to_string(M) + " K=" + std::to_string(K));
  const int Mp = padded_m(M);
  auto *xq = static_cast<std::int8_t *>(staged);
  auto *xds = reinterpret_cast<float2 *>(xq + static_cast<std::size_t>(Mp) * K);
  const dim3 grid(static_cast<unsigned>((K / 8 + kThreads - 1) / kThreads),
                  static_cast<unsigned>(Mp));
  qgemm_quantize_kernel<<<grid, kThreads, 0, s>>>(x, ldx, M, Mp, static_cast<int>(K), xq, xds);
  KEEL_CUDA_CHECK_LAUNCH("qgemm_quantize_input");
}

bool qgemm_supported(QuantFormat f, int M, std::int64_t K, std::size_t smem_per_block) {
  return (f == QuantFormat::kQ8_0 || f == QuantFormat::kQ4_0) && M >= 1 && padded_m(M) <= 65535 &&
         K > 0 && K % quant_block_elems(f) == 0 && K <= (std::int64_t(1) << 24) &&
         smem_bytes(2, block_cols(M)) <= std::min(kMaxSmem, smem_per_block);
}

void launch_qgemm(StreamRef s_ref, const QgemmParams &p, int num_sms) {
  const cudaStream_t s = s_ref.get("launch_qgemm");
  if (p.N <= 0 || p.M <= 0) return;
  const std::size_t limit = std::min(kMaxSmem, qgemv_device_smem());
  if (!qgemm_supported(p.format, p.M, p.K, limit) || (p.ldy > 0 && p.ldy < p.N) || !p.w || !p.y ||
      !p.staged || reinterpret_cast<std::uintptr_t>(p.w) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(p.staged) % 16 != 0 ||
      (p.k_groups != 0 && p.k_groups != 2 && p.k_groups != 4) || (p.N + 31) / 32 > 65535)
    throw Error(ErrorCode::kInvalidArgument, "qgemm: unsupported shape M=" + std::to_string(p.M) +
                                                 " N=" + std::to_string(p.N) +
                                                 " K=" + std::to_string(p.K));
  if (num_sms <= 0) {
    int device = 0;
    KEEL_CUDA_CHECK(cudaGetDevice(&device));
    KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  }
  // Four K groups (32 rows a block, twice the blocks) when two would leave SMs without a
  // block: the N = 4,096 weights (o_proj, down) up to 64 columns.
  int kg = p.k_groups;
  if (kg == 0) {
    const std::int64_t blocks = std::int64_t((p.M + kCols - 1) / kCols) * ((p.N + 63) / 64);
    kg = blocks < num_sms ? 4 : 2;
  }
  if (kg == 4 && smem_bytes(4, block_cols(p.M)) > limit) kg = 2;
  switch (p.format) {
    case QuantFormat::kQ8_0:
      launch_f<QuantFormat::kQ8_0>(s, p, kg);
      break;
    case QuantFormat::kQ4_0:
      launch_f<QuantFormat::kQ4_0>(s, p, kg);
      break;
    default:  // rejected above
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("qgemm");
}

}  // namespace keel::cuda
