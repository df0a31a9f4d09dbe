// MXFP4 dequantization and GEMV (see k_mxfp4.h).
//
// A block is 17 bytes, so blocks are only byte aligned: a lane reads the five aligned
// 32-bit words that cover its block and funnel-shifts them into the scale and four words
// of nibbles. Codes are decoded as twice their e2m1 value (0, 1, 2, 3, 4, 6, 8, 12: small
// integers, looked up four at a time with one byte permute), and the scale is taken as
// 2^(e - 128) built from its exponent bits, so value = (2 e2m1) * 2^(e - 128) is the same
// exact product as the CPU's e2m1 * 2^(e - 127).
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_mxfp4.h"
#include "exec/cuda/k_mxfp4_decode.cuh"

namespace keel::cuda {

namespace {

using mxfp4::decode_block;
using mxfp4::e8m0_half;
using mxfp4::kBlockBytes;
using mxfp4::kBlockElems;
using mxfp4::load_block;

// Block b of src (17 bytes) to its 32 elements at dst + 32 b.
template <typename Out>
__device__ inline void dequantize_block(const std::uint8_t *__restrict__ src, Out *__restrict__ dst,
                                        std::int64_t b) {
  unsigned e, q[4];
  load_block(src + b * kBlockBytes, e, q);
  Out *y = dst + b * kBlockElems;
  if constexpr (sizeof(Out) == 4) {
    float v[32];
    decode_block(q, v);
    const float hs = e8m0_half(e);
#pragma unroll
    for (int r = 0; r < 8; ++r)
      *reinterpret_cast<float4 *>(y + 4 * r) =
          make_float4(__fmul_rn(v[4 * r], hs), __fmul_rn(v[4 * r + 1], hs),
                      __fmul_rn(v[4 * r + 2], hs), __fmul_rn(v[4 * r + 3], hs));
  } else {  // bf16 straight from the codes (the same bits: decode_block_bf16)
    unsigned w[16];
    mxfp4::decode_block_bf16(q, e, w);
#pragma unroll
    for (int r = 0; r < 4; ++r)
      *reinterpret_cast<uint4 *>(y + 8 * r) =
          make_uint4(w[4 * r], w[4 * r + 1], w[4 * r + 2], w[4 * r + 3]);
  }
}

template <typename Out>
__global__ void dequantize_mxfp4_kernel(const std::uint8_t *__restrict__ src, Out *__restrict__ dst,
                                        std::int64_t blocks) {
  const std::int64_t b = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < blocks) dequantize_block(src, dst, b);
}

// blockIdx.y = g: the g-th listed expert e = active[g] (nothing when g >= *n_active), its
// matrix at src + e * stride bytes to dst + e * (32 blocks) elements.
__global__ void dequantize_mxfp4_experts_kernel(const std::uint8_t *__restrict__ src,
                                                std::size_t stride,
                                                const std::int32_t *__restrict__ active,
                                                const std::int32_t *__restrict__ n_active,
                                                bf16 *__restrict__ dst, std::int64_t blocks) {
  const int g = blockIdx.y;
  if (g >= *n_active) return;
  const std::int64_t b = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const std::int64_t e = active[g];
  dequantize_block(src + e * stride, dst + e * blocks * kBlockElems, b);
}

constexpr int kWarps = 8;

// One warp per output row; lane i takes blocks i, i + 32, ... (a warp's loads of one step
// cover 32 consecutive blocks, 544 contiguous bytes). Each block's dot product with the
// integer-valued codes is scaled once by its power of two. blockIdx.y is the slot: rows
// of x and y for slot s start at ((s / slots_per_x) * M) and (s * M); its weights at
// w + expert_ids[s] * expert_stride (or w when expert_ids is null).
template <int M, bool OutF32>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_mxfp4_kernel(const bf16 *__restrict__ x, std::int64_t ldx, int slots_per_x,
                      const std::uint8_t *__restrict__ w, std::size_t expert_stride, int experts,
                      const std::int32_t *__restrict__ expert_ids, void *__restrict__ y,
                      std::int64_t ldy, std::int64_t N, std::int64_t K) {
  const int lane = threadIdx.x % 32;
  const std::int64_t n = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  const int slot = blockIdx.y;
  bool valid = true;
  if (expert_ids) {
    const int e = expert_ids[slot];
    valid = e >= 0 && e < experts;
    w += valid ? static_cast<std::size_t>(e) * expert_stride : 0;
  }
  const bf16 *xs = x + std::int64_t(slot / slots_per_x) * M * ldx;
  const std::int64_t blocks = K / kBlockElems;
  const std::uint8_t *wr = w + n * blocks * kBlockBytes;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  if (valid) {
#pragma unroll 2
    for (std::int64_t b = lane; b < blocks; b += 32) {
      unsigned e, q[4];
      load_block(wr + b * kBlockBytes, e, q);
      float v[32];
      decode_block(q, v);
      const float hs = e8m0_half(e);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const bf16 *xb = xs + m * ldx + b * kBlockElems;
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float xf[8];
          bf16x8_to_float(__ldg(reinterpret_cast<const uint4 *>(xb + 8 * r)), xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) s = fmaf(v[8 * r + j], xf[j], s);
        }
        acc[m] = fmaf(s, hs, acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const std::int64_t at = (std::int64_t(slot) * M + m) * ldy + n;
      if constexpr (OutF32)
        static_cast<float *>(y)[at] = acc[m];
      else
        static_cast<bf16 *>(y)[at] = __float2bfloat16(acc[m]);
    }
  }
}

template <int M>
void gemv_m(cudaStream_t s, dim3 grid, const bf16 *x, std::int64_t ldx, int slots_per_x,
            const void *w, std::size_t stride, int experts, const std::int32_t *ids, void *y,
            bool y_f32, std::int64_t ldy, std::int64_t N, std::int64_t K) {
  const auto *wb = static_cast<const std::uint8_t *>(w);
  if (y_f32)
    gemv_mxfp4_kernel<M, true>
        <<<grid, kWarps * 32, 0, s>>>(x, ldx, slots_per_x, wb, stride, experts, ids, y, ldy, N, K);
  else
    gemv_mxfp4_kernel<M, false>
        <<<grid, kWarps * 32, 0, s>>>(x, ldx, slots_per_x, wb, stride, experts, ids, y, ldy, N, K);
}

void gemv_any(cudaStream_t s, int slots, const bf16 *x, std::int64_t ldx, int slots_per_x,
              const void *w, std::size_t stride, int experts, const std::int32_t *ids, void *y,
              bool y_f32, std::int64_t ldy, int M, std::int64_t N, std::int64_t K) {
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps), static_cast<unsigned>(slots));
  switch (M) {
#define KEEL_MXFP4_CASE(m) \
  case m:                  \
    return gemv_m<m>(s, grid, x, ldx, slots_per_x, w, stride, experts, ids, y, y_f32, ldy, N, K);
    KEEL_MXFP4_CASE(1)
    KEEL_MXFP4_CASE(2)
    KEEL_MXFP4_CASE(3)
    KEEL_MXFP4_CASE(4)
    KEEL_MXFP4_CASE(5)
    KEEL_MXFP4_CASE(6)
    KEEL_MXFP4_CASE(7)
    KEEL_MXFP4_CASE(8)
#undef KEEL_MXFP4_CASE
    default:
      break;
  }
}

void check_shape(const char *what, const bf16 *x, std::int64_t ldx, std::int64_t ldy, int M,
                 std::int64_t N, std::int64_t K) {
  if (M < 1 || M > kMxfp4GemvMaxM || K <= 0 || K % kBlockElems != 0 || ldy < N || ldx < K ||
      ldx % 8 != 0 || reinterpret_cast<std::uintptr_t>(x) % 16 != 0 ||
      N > std::int64_t(0x7fffffff) * kWarps)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(what) + ": unsupported shape M=" + std::to_string(M) +
                    " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

template <typename Out>
void dequant(cudaStream_t s, const void *src, Out *dst, std::int64_t n) {
  if (n <= 0) return;
  if (n % kBlockElems != 0 || n / kBlockElems > std::int64_t(0x7fffffff) * 256 ||
      reinterpret_cast<std::uintptr_t>(dst) % 16 != 0)
    throw Error(ErrorCode::kInvalidArgument, "dequantize_mxfp4: " + std::to_string(n) +
                                                 " elements is not a whole number of blocks");
  const std::int64_t blocks = n / kBlockElems;
  dequantize_mxfp4_kernel<Out><<<static_cast<unsigned>((blocks + 255) / 256), 256, 0, s>>>(
      static_cast<const std::uint8_t *>(src), dst, blocks);
  KEEL_CUDA_CHECK_LAUNCH("dequantize_mxfp4");
}

}  // namespace

void launch_dequantize_mxfp4(StreamRef s_ref, const void *src, bf16 *dst, std::int64_t n) {
  dequant(s_ref.get("launch_dequantize_mxfp4"), src, dst, n);
}

void launch_dequantize_mxfp4_f32(StreamRef s_ref, const void *src, float *dst, std::int64_t n) {
  dequant(s_ref.get("launch_dequantize_mxfp4_f32"), src, dst, n);
}

void launch_dequantize_mxfp4_experts(StreamRef s_ref, const void *w_base, std::size_t expert_stride,
                                     std::int64_t n, const std::int32_t *active,
                                     const std::int32_t *n_active, int max_active, bf16 *dst) {
  const cudaStream_t s = s_ref.get("launch_dequantize_mxfp4_experts");
  if (n <= 0 || max_active <= 0) return;
  const std::int64_t blocks = n / kBlockElems;
  if (n % kBlockElems != 0 || (blocks + 255) / 256 > 0x7fffffff || max_active > 65535 || !active ||
      !n_active || reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      expert_stride < static_cast<std::size_t>(blocks * kBlockBytes))
    throw Error(ErrorCode::kInvalidArgument, "dequantize_mxfp4_experts: bad shape (" +
                                                 std::to_string(n) + " elements per expert)");
  const dim3 grid(static_cast<unsigned>((blocks + 255) / 256), static_cast<unsigned>(max_active));
  dequantize_mxfp4_experts_kernel<<<grid, 256, 0, s>>>(
      static_cast<const std::uint8_t *>(w_base), expert_stride, active, n_active, dst, blocks);
  KEEL_CUDA_CHECK_LAUNCH("dequantize_mxfp4_experts");
}

void launch_gemv_mxfp4(StreamRef s_ref, const bf16 *x, const void *w, void *y, bool y_f32,
                       std::int64_t ldy, int M, std::int64_t N, std::int64_t K) {
  const cudaStream_t s = s_ref.get("launch_gemv_mxfp4");
  if (N <= 0) return;
  check_shape("gemv_mxfp4", x, K, ldy, M, N, K);
  gemv_any(s, 1, x, K, 1, w, 0, 0, nullptr, y, y_f32, ldy, M, N, K);
  KEEL_CUDA_CHECK_LAUNCH("gemv_mxfp4");
}

void launch_gemv_mxfp4_experts(StreamRef s_ref, const bf16 *x, std::int64_t ldx, int slots_per_x,
                               const void *w_base, std::size_t expert_stride, int experts,
                               const std::int32_t *expert_ids, int slots, void *y, bool y_f32,
                               std::int64_t ldy, std::int64_t N, std::int64_t K) {
  const cudaStream_t s = s_ref.get("launch_gemv_mxfp4_experts");
  if (N <= 0 || slots <= 0) return;
  check_shape("gemv_mxfp4_experts", x, ldx, ldy, 1, N, K);
  if (slots_per_x < 1 || experts < 1 || !expert_ids || slots > 65535 ||
      expert_stride < static_cast<std::size_t>(N * (K / kBlockElems) * kBlockBytes))
    throw Error(ErrorCode::kInvalidArgument,
                "gemv_mxfp4_experts: bad slots, experts or expert stride");
  gemv_any(s, slots, x, ldx, slots_per_x, w_base, expert_stride, experts, expert_ids, y, y_f32, ldy,
           1, N, K);
  KEEL_CUDA_CHECK_LAUNCH("gemv_mxfp4_experts");
}

}  // namespace keel::cuda
