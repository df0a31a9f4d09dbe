// Fused decode kernels (see k_decode_fused.h). GEMV: each block stages its M input rows
// once in shared memory -- the prologue (a norm over the whole residual row, or SwiGLU)
// is paid per block, not per output row -- and each warp streams whole weight rows (one
// row per warp, up to kDefaultWaves waves, then warps loop), kUnroll 16-byte loads in
// flight per lane, each loaded weight reused for all M rows. The first chunk of weight
// loads is issued before the PDL wait and the staging, so neither delays the stream.
// (A split-K version, 2 or 4 warps per row, an L2 prefetch of the first rows before the
// wait, and SwiGLU in the down GEMV's prologue were measured slower on the H200 and
// removed: bench/RESULTS.md.)
#include <algorithm>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_decode_fused.h"
#include "exec/cuda/k_mma.cuh"
#include "exec/cuda/k_pdl.cuh"

namespace keel::cuda {

namespace {
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 8;                    // 16-byte weight loads in flight per lane
constexpr std::size_t kMaxSmem = 200 * 1024;  // of the H200's 227 KB per block
// Grid: one row per warp up to this many times the blocks that fit at once; beyond that
// (the LM head) warps loop over rows, so the per-block prologue is not paid 10k times.
constexpr int kDefaultWaves = 4;

// Stages the M input rows into xs [M][K] bf16 (shared). All threads of the block.
template <int M, GemvIn In>
__device__ void stage_input(const FusedGemvParams &p, bf16 *xs, float (*red)[M]) {
  const std::int64_t K = p.K, kv = K / 8;
  uint4 *xs4 = reinterpret_cast<uint4 *>(xs);
  if constexpr (In == GemvIn::kBf16) {
    const uint4 *x4 = reinterpret_cast<const uint4 *>(p.x);
    for (std::int64_t i = threadIdx.x; i < M * kv; i += kThreads) xs4[i] = x4[i];
  } else {
    // Sum of squares of every row in one pass over the residual (f32, from L2).
    const float *rrow[M];
#pragma unroll
    for (int m = 0; m < M; ++m) rrow[m] = p.residual + (p.rows ? p.rows[m] : m) * K;
    float ss[M];
#pragma unroll
    for (int m = 0; m < M; ++m) ss[m] = 0.0f;
    for (std::int64_t j = threadIdx.x; j < K / 4; j += kThreads) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4 v = reinterpret_cast<const float4 *>(rrow[m])[j];
        ss[m] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      for (int o = 16; o > 0; o >>= 1) ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], o);
      if (lane == 0) red[warp][m] = ss[m];
    }
    __syncthreads();
    float inv[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float t = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) t += red[w][m];
      inv[m] = rsqrtf(t / static_cast<float>(K) + p.eps);
    }
    const uint4 *w4 = reinterpret_cast<const uint4 *>(p.norm_weight);
    for (std::int64_t j = threadIdx.x; j < kv; j += kThreads) {
      float wf[8];
      bf16x8_to_float(w4[j], wf);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4 a = reinterpret_cast<const float4 *>(rrow[m])[2 * j];
        const float4 b = reinterpret_cast<const float4 *>(rrow[m])[2 * j + 1];
        const float r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float o[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = r[e] * inv[m] * wf[e];  // as add_rmsnorm rounds
        xs4[m * kv + j] = float8_to_bf16x8(o);
      }
    }
  }
}

// Epilogue of output row `at` (= m * rows + n): a = W[n] x[m], b = W[n + rows] x[m] (kSwiglu).
template <GemvOut Out>
__device__ __forceinline__ void store_output(const FusedGemvParams &p, std::int64_t at, float a,
                                             float b) {
  if constexpr (Out == GemvOut::kF32) {
    static_cast<float *>(p.y)[at] = a;
  } else if constexpr (Out == GemvOut::kBf16) {
    static_cast<bf16 *>(p.y)[at] = __float2bfloat16(a);
  } else if constexpr (Out == GemvOut::kAddResidual) {
    static_cast<float *>(p.y)[at] += __bfloat162float(__float2bfloat16(a));
  } else {  // gate and up rounded to bf16 first, as the GEMM output launch_swiglu reads
    const float g = __bfloat162float(__float2bfloat16(a));
    const float u = __bfloat162float(__float2bfloat16(b));
    static_cast<bf16 *>(p.y)[at] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

template <int M, GemvIn In, GemvOut Out>
__global__ void __launch_bounds__(kThreads) fused_gemv_kernel(const FusedGemvParams p) {
  // kSwiglu output: a warp computes gate row n and up row n + N/2 together.
  constexpr int R = Out == GemvOut::kSwiglu ? 2 : 1;
  extern __shared__ uint4 smem_raw[];
  bf16 *xs = reinterpret_cast<bf16 *>(smem_raw);  // [M][K]
  __shared__ float red[kWarps][M];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t K = p.K, kv = K / 8, rows = p.N / R;
  const std::int64_t stride = std::int64_t(gridDim.x) * kWarps;
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + warp;
  // The weights do not depend on the previous kernel: issue this warp's first chunk of
  // weight loads before waiting for that kernel (under PDL they overlap its tail) and
  // before staging the input (their latency overlaps the staging's).
  uint4 raw[R][kUnroll];
  auto load_chunk = [&](std::int64_t n, std::int64_t v0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 *wr = reinterpret_cast<const uint4 *>(p.w + (n + r * rows) * K);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        raw[r][u] = v0 + 32 * u < kv ? __ldcs(wr + v0 + 32 * u) : make_uint4(0, 0, 0, 0);
    }
  };
  if (first < rows) load_chunk(first, lane);
  wait_for_previous_kernel();
  allow_next_kernel();
  stage_input<M, In>(p, xs, red);
  __syncthreads();

  const uint4 *xs4 = reinterpret_cast<const uint4 *>(xs);
  bool loaded = true;  // the first chunk of the first row is in raw already
  for (std::int64_t n = first; n < rows; n += stride) {
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
    for (std::int64_t v0 = lane; v0 < kv; v0 += 32 * kUnroll) {
      if (!loaded) load_chunk(n, v0);
      loaded = false;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t v = v0 + 32 * u;
        if (v < kv) {
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float xf[8];
            bf16x8_to_float(xs4[m * kv + v], xf);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              float wf[8];
              bf16x8_to_float(raw[r][u], wf);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[r][m] += wf[e] * xf[e];
            }
          }
        }
      }
    }
    // The next row's first loads go out before this row's reduction and store.
    if (n + stride < rows) {
      load_chunk(n + stride, lane);
      loaded = true;
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m)
        for (int o = 16; o > 0; o >>= 1) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], o);
    if (lane < M) {
      float a = acc[0][0], b = acc[R - 1][0];
#pragma unroll
      for (int m = 1; m < M; ++m)
        if (lane == m) a = acc[0][m], b = acc[R - 1][m];
      store_output<Out>(p, std::int64_t(lane) * rows + n, a, b);
    }
  }
}

// ---- Tensor-core variant (M >= 2 by default) ----
// The CUDA-core kernel above converts and multiplies every weight once per input row, so
// its cost grows with M (at M = 4 it was slower than cuBLASLt). Here a block computes a
// group of 32 output rows (16 gate + 16 up rows for kSwiglu) for all M inputs with
// mma.sync m16n8k16: the weights are the A operand (two tiles of 16 rows x 16 k), the
// inputs the B operand (16 k x 8 columns; columns >= M are computed and dropped), f32
// accumulators; so a weight costs the same instructions whatever M is, and each input
// fragment serves both tiles. The block's 8 warps take contiguous slices of K (in
// 32-value spans) and sum their fragments through shared memory. A lane loads 16 bytes of
// one row (8 consecutive k) and of the row 8 below it: logical k (2t + e, 2t + 8 + e) of
// the first MMA are physical k (8t + e, 8t + 2 + e) of the span, the second MMA takes
// (8t + 4 + e, 8t + 6 + e); A and B use the same permutation, so the dot products are
// unchanged. A kBf16 input is read from global memory (L2) as each warp needs its slice,
// not staged: staging M x K in shared memory limited the blocks an SM holds (one at
// M = 4, K = 14336) and so the loads in flight.
constexpr int kMmaUnroll = 4;  // spans in flight per lane (four 16-byte weight loads each)
constexpr int kMmaTiles = 2;   // 16-row tiles a warp computes, sharing each input fragment
// Grid: the blocks that fit at once, looping over groups (each block stages a normed
// input once, whatever the number of groups it computes).
constexpr int kMmaDefaultWaves = 1;

// Rows of output a block-iteration of the tensor-core kernel computes.
template <GemvOut Out>
constexpr int mma_group_rows() {
  return (Out == GemvOut::kSwiglu ? 8 : 16) * kMmaTiles;
}

template <int M, GemvIn In, GemvOut Out>
__global__ void __launch_bounds__(kThreads) fused_gemv_mma_kernel(const FusedGemvParams p) {
  constexpr bool kGlu = Out == GemvOut::kSwiglu;
  constexpr int kGroupRows = mma_group_rows<Out>();
  constexpr int kTileRows = kGroupRows / kMmaTiles;  // output rows of one 16-row MMA tile
  extern __shared__ uint4 smem_raw[];
  bf16 *xs = reinterpret_cast<bf16 *>(smem_raw);  // kRmsNorm: [M][K]
  __shared__ float red[kWarps][M];
  __shared__ float4 part[kWarps][kMmaTiles][32];  // each warp's accumulator fragments
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const std::int64_t K = p.K, rows = kGlu ? p.N / 2 : p.N;
  const std::int64_t groups = (rows + kGroupRows - 1) / kGroupRows;
  const int spans = static_cast<int>(K / 32);
  const int s_begin = warp * spans / kWarps, s_end = (warp + 1) * spans / kWarps;
  // This lane's two weight rows of tile i in group `grp` (row g and the row 8 below; for
  // kSwiglu gate row g and its up row), as 16-byte vectors at k = 8t of span 0. A row
  // past the end reads row 0 (its outputs are never stored).
  const uint4 *ra[kMmaTiles], *rb[kMmaTiles];
  auto rows_of = [&](std::int64_t grp) {
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i) {
      std::int64_t a = grp * kGroupRows + i * kTileRows + g, b = kGlu ? a + rows : a + 8;
      if (a >= rows) a = 0, b = kGlu ? rows : 0;
      if (b >= (kGlu ? 2 * rows : rows)) b = 0;
      ra[i] = reinterpret_cast<const uint4 *>(p.w + a * K) + t;
      rb[i] = reinterpret_cast<const uint4 *>(p.w + b * K) + t;
    }
  };
  uint4 wa[kMmaTiles][kMmaUnroll], wb[kMmaTiles][kMmaUnroll];
  auto load = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u)
      if (s0 + u < s_end)
#pragma unroll
        for (int i = 0; i < kMmaTiles; ++i) {
          wa[i][u] = __ldcs(ra[i] + 4 * (s0 + u));
          wb[i][u] = __ldcs(rb[i] + 4 * (s0 + u));
        }
  };
  // The first loads go out before the staging (and before the PDL wait, a no-op as
  // launch_variant launches this kernel).
  bool loaded = false;
  if (blockIdx.x < groups) {
    rows_of(blockIdx.x);
    load(s_begin);
    loaded = true;
  }
  wait_for_previous_kernel();
  allow_next_kernel();
  // B operand: input row g (a column past M reads row M - 1 and is dropped).
  const uint4 *xr;
  if constexpr (In == GemvIn::kRmsNorm) {
    stage_input<M, In>(p, xs, red);
    __syncthreads();
    xr = reinterpret_cast<const uint4 *>(xs + std::int64_t(min(g, M - 1)) * K) + t;
  } else {
    xr = reinterpret_cast<const uint4 *>(p.x + std::int64_t(min(g, M - 1)) * K) + t;
  }
  for (std::int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    float c[kMmaTiles][4] = {};
    for (int s0 = s_begin; s0 < s_end; s0 += kMmaUnroll) {
      if (!loaded) load(s0);
      loaded = false;
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u)
        if (s0 + u < s_end) {
          const uint4 x = xr[4 * (s0 + u)];
#pragma unroll
          for (int i = 0; i < kMmaTiles; ++i) {
            const std::uint32_t lo[4] = {wa[i][u].x, wb[i][u].x, wa[i][u].y, wb[i][u].y};
            const std::uint32_t hi[4] = {wa[i][u].z, wb[i][u].z, wa[i][u].w, wb[i][u].w};
            mma_bf16(c[i], lo, x.x, x.y);
            mma_bf16(c[i], hi, x.z, x.w);
          }
        }
    }
    // The next group's first loads go out before this group's reduction and stores.
    if (grp + gridDim.x < groups) {
      rows_of(grp + gridDim.x);
      load(s_begin);
      loaded = true;
    }
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i)
      part[warp][i][lane] = make_float4(c[i][0], c[i][1], c[i][2], c[i][3]);
    __syncthreads();
    // Fragment: c0, c1 = (row g, columns 2t, 2t + 1), c2, c3 = (row g + 8, same columns);
    // for kSwiglu row g + 8 is the up row of gate row g.
    constexpr int kPerLane = kGlu ? 2 : 4;  // outputs a lane's fragment holds
    constexpr int kOutputs = kMmaTiles * 32 * kPerLane;
    for (int o = threadIdx.x; o < kOutputs; o += kThreads) {
      const int i = o / (32 * kPerLane), src = o / kPerLane % 32, e = o % kPerLane;
      const int m = 2 * (src % 4) + (e & 1);
      const std::int64_t n = grp * kGroupRows + i * kTileRows + src / 4 + (kGlu ? 0 : (e >> 1) * 8);
      float a = 0.0f, b = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float *f = reinterpret_cast<const float *>(&part[w][i][src]);
        a += f[e];
        if constexpr (kGlu) b += f[e + 2];
      }
      if (m < M && n < rows) store_output<Out>(p, std::int64_t(m) * rows + n, a, b);
    }
    __syncthreads();  // part is rewritten by the next group
  }
}

// The current device's opt-in shared memory per block.
std::size_t device_smem_optin() {
  int device = 0, optin = 0;
  KEEL_CUDA_CHECK(cudaGetDevice(&device));
  KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(optin);
}

// The CUDA-core kernel (one output row per warp, a block on kWarps rows at once) or the
// tensor-core one (a block on a group of 32 rows, 16 for kSwiglu), as fused_gemv_uses_mma.
template <int M, GemvIn In, GemvOut Out>
void launch_variant(cudaStream_t s, const FusedGemvParams &p, int num_sms) {
  const bool mma = fused_gemv_uses_mma(p.M, p.K, p.mma);
  auto kernel = fused_gemv_mma_kernel<M, In, Out>;
  if constexpr (M <= kFusedGemvCoreMaxM)
    if (!mma) kernel = fused_gemv_kernel<M, In, Out>;
  const int rows_per_block = mma ? mma_group_rows<Out>() : kWarps;
  // The tensor-core kernel stages only a normed input; it reads a bf16 one from L2.
  const std::size_t smem = fused_gemv_staged_bytes(M, p.K, In, p.mma);
  // The same value for every launch on this device (kMaxSmem or the device's opt-in
  // limit, whichever is less), so two engines' threads never race over the attribute.
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(std::min(kMaxSmem, device_smem_optin()))));
  int per_sm = 0;
  KEEL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const std::int64_t rows = p.out == GemvOut::kSwiglu ? p.N / 2 : p.N;
  const std::int64_t need = (rows + rows_per_block - 1) / rows_per_block;
  const int waves = p.max_waves > 0 ? p.max_waves : mma ? kMmaDefaultWaves : kDefaultWaves;
  const std::int64_t fit = std::int64_t(std::max(per_sm, 1)) * std::max(num_sms, 1) * waves;
  // The tensor-core kernel is launched as a plain dependent even under PDL: launched early
  // it made 8B decode at 2 / 4 / 8 seqs 227 / 441 / 884 tok/s on an H100, plainly 321 /
  // 633 / 1,214 (bench/RESULTS.md, session 16). It still lets the kernel after it start
  // early (allow_next_kernel).
  launch_maybe_pdl(kernel, dim3(static_cast<unsigned>(std::min(need, fit))), dim3(kThreads), smem,
                   s, p.pdl && !mma, p);
}

template <int M>
void launch_m(cudaStream_t s, const FusedGemvParams &p, int num_sms) {
  using I = GemvIn;
  using O = GemvOut;
  switch (p.in) {
    case I::kBf16:
      if (p.out == O::kBf16) return launch_variant<M, I::kBf16, O::kBf16>(s, p, num_sms);
      if (p.out == O::kF32) return launch_variant<M, I::kBf16, O::kF32>(s, p, num_sms);
      if (p.out == O::kAddResidual)
        return launch_variant<M, I::kBf16, O::kAddResidual>(s, p, num_sms);
      break;
    case I::kRmsNorm:
      if (p.out == O::kBf16) return launch_variant<M, I::kRmsNorm, O::kBf16>(s, p, num_sms);
      if (p.out == O::kF32) return launch_variant<M, I::kRmsNorm, O::kF32>(s, p, num_sms);
      if (p.out == O::kSwiglu) return launch_variant<M, I::kRmsNorm, O::kSwiglu>(s, p, num_sms);
      break;
  }
  throw Error(ErrorCode::kInvalidArgument, "fused_gemv: unsupported input/output combination");
}

// ---- qkv bias + q/k norm + RoPE + KV write ----
__global__ void __launch_bounds__(kThreads) qkv_rope_kv_kernel(const QkvRopeKvParams p) {
  __shared__ float head_buf[kWarps][kAttnMaxHeadDim];
  wait_for_previous_kernel();
  allow_next_kernel();
  const int t = blockIdx.x;  // blockIdx.y: a group of kWarps heads, one per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nq = p.num_q_heads, nkv = p.num_kv_heads, hd = p.head_dim, half = hd / 2;
  const int heads = nq + 2 * nkv;
  bf16 *row = p.qkv + std::int64_t(t) * heads * hd;
  const float pos = static_cast<float>(p.positions[t]);
  const std::int32_t slot = p.slots[t];
  bf16 *k_dst = nullptr, *v_dst = nullptr;
  if (slot >= 0) {
    const std::int64_t block = slot / p.layout.block_size;
    const int in_block = slot % p.layout.block_size;
    k_dst = p.cache + p.layout.offset(block, p.layer, 0, in_block);
    v_dst = p.cache + p.layout.offset(block, p.layer, 1, in_block);
  }
  float *buf = head_buf[warp];
  for (int h = blockIdx.y * kWarps + warp; h < heads; h += kWarps * gridDim.y) {
    bf16 *x = row + std::int64_t(h) * hd;
    const bool is_q = h < nq, is_k = !is_q && h < nq + nkv;
    const bf16 *nw = is_q ? p.q_norm : (is_k ? p.k_norm : nullptr);
    // Bias, rounded like the projection output it belongs to, then the head norm, rounded
    // like the qkv activation it is written back to (as qkv_bias_norm then rope see it).
    float ss = 0.0f;
    for (int d = lane; d < hd; d += 32) {
      float v = __bfloat162float(x[d]);
      if (p.bias) v = __bfloat162float(__float2bfloat16(v + __bfloat162float(p.bias[h * hd + d])));
      buf[d] = v;
      ss += v * v;
    }
    if (nw) {
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = rsqrtf(ss / hd + p.eps);
      for (int d = lane; d < hd; d += 32)
        buf[d] = __bfloat162float(__float2bfloat16(buf[d] * inv * __bfloat162float(nw[d])));
    }
    __syncwarp();
    if (is_q || is_k) {
      bf16 *dst = is_k && k_dst ? k_dst + std::int64_t(h - nq) * hd : nullptr;
      for (int i = lane; i < half; i += 32) {
        float sn, cs;
        sincosf(pos * p.inv_freq[i], &sn, &cs);
        cs *= p.mscale;
        sn *= p.mscale;
        const int a = p.interleaved ? 2 * i : i, b = p.interleaved ? 2 * i + 1 : i + half;
        const float x1 = buf[a], x2 = buf[b];
        const bf16 o1 = __float2bfloat16(x1 * cs - x2 * sn);
        const bf16 o2 = __float2bfloat16(x2 * cs + x1 * sn);
        x[a] = o1;
        x[b] = o2;
        if (dst) {
          dst[a] = o1;
          dst[b] = o2;
        }
      }
    } else {
      bf16 *dst = v_dst ? v_dst + std::int64_t(h - nq - nkv) * hd : nullptr;
      for (int d = lane; d < hd; d += 32) {
        const bf16 o = __float2bfloat16(buf[d]);
        if (p.bias) x[d] = o;
        if (dst) dst[d] = o;
      }
    }
    __syncwarp();  // buf is reused by this warp's next head
  }
}
}  // namespace

std::size_t fused_gemv_smem_bytes(int M, std::int64_t K) {
  return static_cast<std::size_t>(M) * static_cast<std::size_t>(K) * sizeof(bf16);
}

bool fused_gemv_uses_mma(int M, std::int64_t K, int mma) {
  if (K % 32 != 0) return false;
  if (M > kFusedGemvCoreMaxM) return true;
  return mma > 0 || (mma < 0 && M >= kFusedGemvMmaMinM);
}

std::size_t fused_gemv_staged_bytes(int M, std::int64_t K, GemvIn in, int mma) {
  return in == GemvIn::kBf16 && fused_gemv_uses_mma(M, K, mma) ? 0 : fused_gemv_smem_bytes(M, K);
}

bool fused_gemv_supported(int M, std::int64_t K, std::size_t smem_per_block, GemvIn in) {
  return M >= 1 && M <= kFusedGemvMaxM && K > 0 && K % 8 == 0 &&
         (M <= kFusedGemvCoreMaxM || K % 32 == 0) &&
         fused_gemv_staged_bytes(M, K, in, -1) <= std::min(kMaxSmem, smem_per_block);
}

void launch_fused_gemv(StreamRef s_ref, const FusedGemvParams &p, int num_sms) {
  const cudaStream_t s = s_ref.get("launch_fused_gemv");
  if (p.N <= 0) return;
  auto aligned = [](const void *q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
  const bool in_ok = p.in == GemvIn::kRmsNorm ? p.residual && p.norm_weight &&
                                                    aligned(p.residual) && aligned(p.norm_weight)
                                              : p.x && aligned(p.x);
  if (!fused_gemv_supported(p.M, p.K, device_smem_optin(), p.in) ||
      fused_gemv_staged_bytes(p.M, p.K, p.in, p.mma) > std::min(kMaxSmem, device_smem_optin()) ||
      !p.w || !aligned(p.w) || !in_ok || !p.y || (p.out == GemvOut::kSwiglu && p.N % 2 != 0) ||
      p.N > (std::int64_t(1) << 40))
    throw Error(ErrorCode::kInvalidArgument, "fused_gemv: unsupported shape M=" +
                                                 std::to_string(p.M) + " K=" + std::to_string(p.K));
  switch (p.M) {
    case 1:
      return launch_m<1>(s, p, num_sms);
    case 2:
      return launch_m<2>(s, p, num_sms);
    case 3:
      return launch_m<3>(s, p, num_sms);
    case 4:
      return launch_m<4>(s, p, num_sms);
    case 5:
      return launch_m<5>(s, p, num_sms);
    case 6:
      return launch_m<6>(s, p, num_sms);
    case 7:
      return launch_m<7>(s, p, num_sms);
    default:
      return launch_m<8>(s, p, num_sms);
  }
}

void launch_qkv_rope_kv(StreamRef s_ref, const QkvRopeKvParams &p) {
  const cudaStream_t s = s_ref.get("launch_qkv_rope_kv");
  if (p.T <= 0) return;
  if (p.head_dim <= 0 || p.head_dim > kAttnMaxHeadDim || p.head_dim % 2 != 0)
    throw Error(ErrorCode::kInvalidArgument, "qkv_rope_kv: head_dim " + std::to_string(p.head_dim));
  const int heads = p.num_q_heads + 2 * p.num_kv_heads;
  launch_maybe_pdl(
      qkv_rope_kv_kernel,
      dim3(static_cast<unsigned>(p.T), static_cast<unsigned>((heads + kWarps - 1) / kWarps)),
      dim3(kThreads), 0, s, p.pdl, p);
}

}  // namespace keel::cuda
