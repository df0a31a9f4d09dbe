// FP8 e4m3 weights (k_fp8.h). A thread or lane takes 16 weights (one 16-byte load) that lie
// in one 128-column scale block. e4m3 -> f16: on sm_89+ the cvt.rn.f16x2.e4m3x2 instruction
// (cuda_fp8.h); elsewhere the e4m3 bits placed in an f16 (sign to bit 15, exponent and
// mantissa shifted by 7) are the value / 256 exactly, subnormals included, so the scale is
// multiplied by 256 (exact) instead. Both convert exactly; the scale is one __fmul_rn, as
// in formats/quant.cpp.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_fp8.h"
#include "exec/cuda/k_fp8_decode.cuh"

namespace keel::cuda {

namespace {

constexpr int kWarps = 8;

using fp8::convert_factor;
using fp8::e4m3x4;

// Vector v (16 weights) of the [N, K] weight w to dst + 16 v.
template <bool Portable, typename Out>
__device__ inline void dequantize_vec(const uint4 *__restrict__ w, const float *__restrict__ scales,
                                      std::int64_t block_rows, std::int64_t K, std::int64_t v,
                                      Out *__restrict__ dst) {
  const std::int64_t e0 = v * 16, n = e0 / K, k0 = e0 % K;
  const std::int64_t gc = (K + kFp8ScaleCols - 1) / kFp8ScaleCols;
  const float s = __ldg(scales + (n / block_rows) * gc + k0 / kFp8ScaleCols);
  float f[16];
  fp8::dequantize16<Portable>(__ldg(w + v), s, f);
  Out *y = dst + e0;
  if constexpr (sizeof(Out) == 4) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      reinterpret_cast<float4 *>(y)[q] =
          make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
  } else {
    uint4 packed[2];
    __nv_bfloat162 *p2 = reinterpret_cast<__nv_bfloat162 *>(packed);
#pragma unroll
    for (int e = 0; e < 8; ++e) p2[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
    reinterpret_cast<uint4 *>(y)[0] = packed[0];
    reinterpret_cast<uint4 *>(y)[1] = packed[1];
  }
}

template <bool Portable, typename Out>
__global__ void dequantize_fp8_kernel(const uint4 *__restrict__ w, const float *__restrict__ scales,
                                      std::int64_t block_rows, std::int64_t K, std::int64_t vecs,
                                      Out *__restrict__ dst) {
  const std::int64_t v = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v < vecs) dequantize_vec<Portable>(w, scales, block_rows, K, v, dst);
}

// blockIdx.y = g: expert e = active[g] (nothing when g >= *n_active).
__global__ void dequantize_fp8_experts_kernel(Fp8Experts w, const std::int32_t *__restrict__ active,
                                              const std::int32_t *__restrict__ n_active,
                                              bf16 *__restrict__ dst, std::int64_t dst_stride,
                                              std::int64_t vecs) {
  const int g = blockIdx.y;
  if (g >= *n_active) return;
  const std::int64_t v = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  const std::int64_t e = active[g];
  const auto *wv =
      reinterpret_cast<const uint4 *>(static_cast<const std::uint8_t *>(w.w) + e * w.stride);
  const auto *sc = reinterpret_cast<const float *>(
      reinterpret_cast<const std::uint8_t *>(w.scales) + e * w.stride);
  dequantize_vec<false>(wv, sc, w.block_rows, w.K, v, dst + e * dst_stride);
}

// One warp per output row; lane i takes 16-byte vectors i, i + 32, ... (a warp step reads
// 512 contiguous bytes of the row); each vector's 16 products are summed, then scaled once.
template <int M, bool OutF32, bool Portable>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_fp8_kernel(const bf16 *__restrict__ x, const uint4 *__restrict__ w,
                    const float *__restrict__ scales, std::int64_t block_rows, void *__restrict__ y,
                    std::int64_t ldy, std::int64_t N, std::int64_t K) {
  const int lane = threadIdx.x % 32;
  const std::int64_t n = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  const std::int64_t vecs = K / 16, gc = (K + kFp8ScaleCols - 1) / kFp8ScaleCols;
  const uint4 *wr = w + n * vecs;
  const float *srow = scales + (n / block_rows) * gc;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
#pragma unroll 4
  for (std::int64_t v = lane; v < vecs; v += 32) {
    const uint4 raw = __ldg(wr + v);
    const float s = __ldg(srow + v / (kFp8ScaleCols / 16)) * convert_factor<Portable>();
    float wf[16];
    e4m3x4<Portable>(raw.x, wf);
    e4m3x4<Portable>(raw.y, wf + 4);
    e4m3x4<Portable>(raw.z, wf + 8);
    e4m3x4<Portable>(raw.w, wf + 12);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint4 *xv = reinterpret_cast<const uint4 *>(x + m * K + v * 16);
      float xf[16];
      bf16x8_to_float(__ldg(xv), xf);
      bf16x8_to_float(__ldg(xv + 1), xf + 8);
      float p = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) p = fmaf(wf[e], xf[e], p);
      acc[m] = fmaf(p, s, acc[m]);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if constexpr (OutF32)
        static_cast<float *>(y)[m * ldy + n] = acc[m];
      else
        static_cast<bf16 *>(y)[m * ldy + n] = __float2bfloat16(acc[m]);
    }
  }
}

// gemv_fp8_kernel at M = 1 with a slot per blockIdx.y: the slot's expert from ids.
template <bool OutF32>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_fp8_experts_kernel(Fp8Experts w, const bf16 *__restrict__ x, std::int64_t ldx,
                            int slots_per_x, const std::int32_t *__restrict__ ids,
                            void *__restrict__ y, std::int64_t ldy) {
  const int lane = threadIdx.x % 32;
  const std::int64_t n = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= w.N) return;
  const int slot = blockIdx.y;
  const int e = ids[slot];
  float acc = 0.0f;
  if (e >= 0 && e < w.experts) {
    const std::int64_t vecs = w.K / 16, gc = (w.K + kFp8ScaleCols - 1) / kFp8ScaleCols;
    const auto *base = static_cast<const std::uint8_t *>(w.w) + std::size_t(e) * w.stride;
    const uint4 *wr = reinterpret_cast<const uint4 *>(base) + n * vecs;
    const float *srow =
        reinterpret_cast<const float *>(reinterpret_cast<const std::uint8_t *>(w.scales) +
                                        std::size_t(e) * w.stride) +
        (n / w.block_rows) * gc;
    const bf16 *xs = x + std::int64_t(slot / slots_per_x) * ldx;
#pragma unroll 4
    for (std::int64_t v = lane; v < vecs; v += 32) {
      const uint4 raw = __ldg(wr + v);
      const float s = __ldg(srow + v / (kFp8ScaleCols / 16)) * convert_factor<false>();
      float wf[16];
      e4m3x4<false>(raw.x, wf);
      e4m3x4<false>(raw.y, wf + 4);
      e4m3x4<false>(raw.z, wf + 8);
      e4m3x4<false>(raw.w, wf + 12);
      const uint4 *xv = reinterpret_cast<const uint4 *>(xs + v * 16);
      float xf[16];
      bf16x8_to_float(__ldg(xv), xf);
      bf16x8_to_float(__ldg(xv + 1), xf + 8);
      float p = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) p = fmaf(wf[i], xf[i], p);
      acc = fmaf(p, s, acc);
    }
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    const std::int64_t at = std::int64_t(slot) * ldy + n;
    if constexpr (OutF32)
      static_cast<float *>(y)[at] = acc;
    else
      static_cast<bf16 *>(y)[at] = __float2bfloat16(acc);
  }
}

void check_experts(const Fp8Experts &w, const char *what) {
  const std::size_t scale_bytes =
      static_cast<std::size_t>((w.N + w.block_rows - 1) / std::max<std::int64_t>(w.block_rows, 1) *
                               ((w.K + kFp8ScaleCols - 1) / kFp8ScaleCols) * 4);
  if (w.N < 0 || w.K <= 0 || w.K % 16 != 0 || w.block_rows <= 0 || !w.w || !w.scales ||
      w.experts < 1 || w.stride % 16 != 0 || w.stride < static_cast<std::size_t>(w.N * w.K) ||
      w.stride < scale_bytes || reinterpret_cast<std::uintptr_t>(w.w) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(w.scales) % 4 != 0)
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": unsupported fp8 experts N=" +
                                                 std::to_string(w.N) + " K=" + std::to_string(w.K));
}

void check_weight(const Fp8Weight &w, const char *what) {
  if (w.N < 0 || w.K <= 0 || w.K % 16 != 0 || w.block_rows <= 0 || w.scales == nullptr ||
      reinterpret_cast<std::uintptr_t>(w.w) % 16 != 0)
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": unsupported fp8 weight N=" +
                                                 std::to_string(w.N) + " K=" + std::to_string(w.K));
}

template <typename Out>
void dequant(cudaStream_t s, const Fp8Weight &w, Out *dst, Fp8Convert cvt) {
  check_weight(w, "dequantize_fp8");
  const std::int64_t vecs = w.N * w.K / 16;
  if (vecs == 0) return;
  const unsigned grid = static_cast<unsigned>((vecs + 255) / 256);
  const auto *wv = static_cast<const uint4 *>(w.w);
  if (cvt == Fp8Convert::kPortable)
    dequantize_fp8_kernel<true, Out>
        <<<grid, 256, 0, s>>>(wv, w.scales, w.block_rows, w.K, vecs, dst);
  else
    dequantize_fp8_kernel<false, Out>
        <<<grid, 256, 0, s>>>(wv, w.scales, w.block_rows, w.K, vecs, dst);
  KEEL_CUDA_CHECK_LAUNCH("dequantize_fp8");
}

template <int M, bool Portable>
void gemv_m(cudaStream_t s, const Fp8Weight &w, const bf16 *x, void *y, bool y_f32,
            std::int64_t ldy) {
  const unsigned grid = static_cast<unsigned>((w.N + kWarps - 1) / kWarps);
  const auto *wv = static_cast<const uint4 *>(w.w);
  if (y_f32)
    gemv_fp8_kernel<M, true, Portable>
        <<<grid, kWarps * 32, 0, s>>>(x, wv, w.scales, w.block_rows, y, ldy, w.N, w.K);
  else
    gemv_fp8_kernel<M, false, Portable>
        <<<grid, kWarps * 32, 0, s>>>(x, wv, w.scales, w.block_rows, y, ldy, w.N, w.K);
}

template <bool Portable>
void gemv(cudaStream_t s, const Fp8Weight &w, const bf16 *x, void *y, bool y_f32, std::int64_t ldy,
          int M) {
  switch (M) {
    case 1:
      return gemv_m<1, Portable>(s, w, x, y, y_f32, ldy);
    case 2:
      return gemv_m<2, Portable>(s, w, x, y, y_f32, ldy);
    case 3:
      return gemv_m<3, Portable>(s, w, x, y, y_f32, ldy);
    case 4:
      return gemv_m<4, Portable>(s, w, x, y, y_f32, ldy);
    case 5:
      return gemv_m<5, Portable>(s, w, x, y, y_f32, ldy);
    case 6:
      return gemv_m<6, Portable>(s, w, x, y, y_f32, ldy);
    case 7:
      return gemv_m<7, Portable>(s, w, x, y, y_f32, ldy);
    default:
      return gemv_m<8, Portable>(s, w, x, y, y_f32, ldy);
  }
}

}  // namespace

void launch_dequantize_fp8(StreamRef s, const Fp8Weight &w, bf16 *dst, Fp8Convert cvt) {
  dequant(s.get("launch_dequantize_fp8"), w, dst, cvt);
}

void launch_dequantize_fp8_f32(StreamRef s, const Fp8Weight &w, float *dst, Fp8Convert cvt) {
  dequant(s.get("launch_dequantize_fp8_f32"), w, dst, cvt);
}

void launch_gemv_fp8_experts(StreamRef s_ref, const Fp8Experts &w, const bf16 *x, std::int64_t ldx,
                             int slots_per_x, const std::int32_t *ids, int slots, void *y,
                             bool y_f32, std::int64_t ldy) {
  const cudaStream_t s = s_ref.get("launch_gemv_fp8_experts");
  check_experts(w, "gemv_fp8_experts");
  if (w.N == 0 || slots <= 0) return;
  if (slots > 65535 || slots_per_x < 1 || !ids || ldy < w.N || ldx < w.K || ldx % 8 != 0 ||
      reinterpret_cast<std::uintptr_t>(x) % 16 != 0 || w.N > std::int64_t(0x7fffffff) * kWarps)
    throw Error(ErrorCode::kInvalidArgument,
                "gemv_fp8_experts: unsupported shape N=" + std::to_string(w.N) + " slots " +
                    std::to_string(slots));
  const dim3 grid(static_cast<unsigned>((w.N + kWarps - 1) / kWarps), static_cast<unsigned>(slots));
  if (y_f32)
    gemv_fp8_experts_kernel<true><<<grid, kWarps * 32, 0, s>>>(w, x, ldx, slots_per_x, ids, y, ldy);
  else
    gemv_fp8_experts_kernel<false>
        <<<grid, kWarps * 32, 0, s>>>(w, x, ldx, slots_per_x, ids, y, ldy);
  KEEL_CUDA_CHECK_LAUNCH("gemv_fp8_experts");
}

void launch_dequantize_fp8_experts(StreamRef s_ref, const Fp8Experts &w, const std::int32_t *active,
                                   const std::int32_t *n_active, int max_active, bf16 *dst,
                                   std::int64_t dst_stride) {
  const cudaStream_t s = s_ref.get("launch_dequantize_fp8_experts");
  check_experts(w, "dequantize_fp8_experts");
  const std::int64_t vecs = w.N * w.K / 16;
  if (vecs == 0 || max_active <= 0) return;
  if (max_active > 65535 || !active || !n_active || dst_stride < w.N * w.K || dst_stride % 8 != 0 ||
      reinterpret_cast<std::uintptr_t>(dst) % 16 != 0)
    throw Error(ErrorCode::kInvalidArgument, "dequantize_fp8_experts: bad destination");
  const dim3 grid(static_cast<unsigned>((vecs + 255) / 256), static_cast<unsigned>(max_active));
  dequantize_fp8_experts_kernel<<<grid, 256, 0, s>>>(w, active, n_active, dst, dst_stride, vecs);
  KEEL_CUDA_CHECK_LAUNCH("dequantize_fp8_experts");
}

void launch_gemv_fp8(StreamRef s_ref, const Fp8Weight &w, const bf16 *x, void *y, bool y_f32,
                     std::int64_t ldy, int M, Fp8Convert cvt) {
  const cudaStream_t s = s_ref.get("launch_gemv_fp8");
  check_weight(w, "gemv_fp8");
  if (w.N == 0) return;
  if (M < 1 || M > kFp8GemvMaxM || ldy < w.N || reinterpret_cast<std::uintptr_t>(x) % 16 != 0 ||
      w.N > std::int64_t(0x7fffffff) * kWarps)
    throw Error(ErrorCode::kInvalidArgument,
                "gemv_fp8: unsupported shape M=" + std::to_string(M) + " N=" + std::to_string(w.N));
  if (cvt == Fp8Convert::kPortable)
    gemv<true>(s, w, x, y, y_f32, ldy, M);
  else
    gemv<false>(s, w, x, y, y_f32, ldy, M);
  KEEL_CUDA_CHECK_LAUNCH("gemv_fp8");
}

}  // namespace keel::cuda
