// Dequantization of Q4_K / Q5_K super-blocks a warp a super-block (k_dequant_kquant.h). Lane l
// produces values 8l..8l+7 of its block, so a warp's stores of one block are 512 (bf16) or
// 1,024 (f32) contiguous bytes: whole sectors. Each warp loads the bytes of kPerWarp blocks
// before decoding any (bytes in flight for the copy rate), and turns codes into floats by an
// exponent trick (integer ops) rather than the conversion unit. The chunk kernel it replaces
// for these formats (k_quant.cu, a thread per 32 values, its four 16-byte runs 32 bytes apart)
// ran the q4_k 8B gate_up at 0.34x the copy bandwidth's bytes; this one at 0.94x (H100, session
// 27, bench/RESULTS.md). Q6_K stays on the chunk kernel: its 210-byte blocks are only 2-byte
// aligned, so a lane's 8 values took five 2-byte loads here and the kernel ran slower (0.65x
// against the chunk kernel's 0.83x on the qkv shape).
// Values are formats/quant.cpp's, computed with the same IEEE operations (explicit _rn
// intrinsics, no contraction), so they equal the CPU reference bit for bit.
#include <cuda_fp16.h>

#include <type_traits>

#include "exec/cuda/k_dequant_kquant.h"
#include "exec/cuda/k_qgemv_common.cuh"

namespace keel::cuda {

namespace {

using qgemv_detail::f16_bits;
using qgemv_detail::k_scale_min;
using qgemv_detail::small_int_to_float;

constexpr int kWarps = 8;
constexpr int kPerWarp = 4;  // super-blocks a warp loads before decoding
constexpr int kBlocksPerCta = kWarps * kPerWarp;

__device__ __forceinline__ unsigned byte_at(uint2 v, int e) {
  return ((e < 4 ? v.x : v.y) >> (8 * (e % 4))) & 0xFFu;
}

// A lane's bytes of one super-block, loaded ahead of its decode.
template <QuantFormat F>
struct Lane;

// Q4_K (144 bytes, 16-byte aligned): lane l takes sub-block j = 2g + hi (g = l / 8, hi =
// l % 8 / 4), positions p = 8 (l % 4) + [0, 8) of its 32: qs[32g + p], the low nibbles for
// hi = 0, the high ones for hi = 1.
template <>
struct Lane<QuantFormat::kQ4_K> {
  static constexpr int kBytes = 144;
  uint4 head;
  uint2 qs;
  __device__ void load(const std::uint8_t *b, int l) {
    head = __ldg(reinterpret_cast<const uint4 *>(b));
    qs = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 32 * (l / 8) + 8 * (l % 4)));
  }
  __device__ void decode(int l, float v[8]) const {
    const int j = 2 * (l / 8) + (l % 8) / 4, shift = 4 * ((l % 8) / 4);
    int sc, mn;
    k_scale_min(head, j, sc, mn);
    const float dd = __fmul_rn(f16_bits(head.x), small_int_to_float(sc));
    const float mm = __fmul_rn(f16_bits(head.x >> 16), small_int_to_float(mn));
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = __fsub_rn(
          __fmul_rn(dd, small_int_to_float(static_cast<int>((byte_at(qs, e) >> shift) & 0xF))), mm);
  }
};

// Q5_K (176 bytes, 16-byte aligned): Q4_K's positions, qs at 48, plus fifth bits from
// qh[p] (at 16): bit 2g + hi.
template <>
struct Lane<QuantFormat::kQ5_K> {
  static constexpr int kBytes = 176;
  uint4 head;
  uint2 qs, qh;
  __device__ void load(const std::uint8_t *b, int l) {
    head = __ldg(reinterpret_cast<const uint4 *>(b));
    qh = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 8 * (l % 4)));
    qs = __ldg(reinterpret_cast<const uint2 *>(b + 48 + 32 * (l / 8) + 8 * (l % 4)));
  }
  __device__ void decode(int l, float v[8]) const {
    const int hi = (l % 8) / 4, j = 2 * (l / 8) + hi, shift = 4 * hi;
    int sc, mn;
    k_scale_min(head, j, sc, mn);
    const float dd = __fmul_rn(f16_bits(head.x), small_int_to_float(sc));
    const float mm = __fmul_rn(f16_bits(head.x >> 16), small_int_to_float(mn));
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int q =
          static_cast<int>(((byte_at(qs, e) >> shift) & 0xF) | (((byte_at(qh, e) >> j) & 1) << 4));
      v[e] = __fsub_rn(__fmul_rn(dd, small_int_to_float(q)), mm);
    }
  }
};

template <typename Out>
__device__ __forceinline__ void store8(Out *dst, const float v[8]) {
  if constexpr (sizeof(Out) == 4) {
    reinterpret_cast<float4 *>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 packed;
    __nv_bfloat162 *p2 = reinterpret_cast<__nv_bfloat162 *>(&packed);
#pragma unroll
    for (int e = 0; e < 4; ++e) p2[e] = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
    *reinterpret_cast<uint4 *>(dst) = packed;
  }
}

// Super-blocks [first, first + kPerWarp) of `blocks` at src, a warp's, to dst.
template <QuantFormat F, typename Out>
__device__ __forceinline__ void dequantize_warp(const std::uint8_t *__restrict__ src,
                                                Out *__restrict__ dst, std::int64_t first,
                                                std::int64_t blocks) {
  const int l = threadIdx.x % 32;
  Lane<F> lanes[kPerWarp];
#pragma unroll
  for (int u = 0; u < kPerWarp; ++u)
    if (first + u < blocks) lanes[u].load(src + (first + u) * Lane<F>::kBytes, l);
#pragma unroll
  for (int u = 0; u < kPerWarp; ++u) {
    if (first + u >= blocks) break;
    float v[8];
    lanes[u].decode(l, v);
    store8(dst + (first + u) * 256 + 8 * l, v);
  }
}

template <QuantFormat F, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    dequantize_kquant_kernel(const std::uint8_t *__restrict__ src, Out *__restrict__ dst,
                             std::int64_t blocks) {
  const std::int64_t first =
      (std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * std::int64_t(kPerWarp);
  if (first < blocks) dequantize_warp<F>(src, dst, first, blocks);
}

// blockIdx.y = g: expert e = active[g] (nothing when g >= *n_active).
template <QuantFormat F>
__global__ void __launch_bounds__(kWarps * 32)
    dequantize_kquant_experts_kernel(const std::uint8_t *__restrict__ src, std::size_t stride,
                                     const std::int32_t *__restrict__ active,
                                     const std::int32_t *__restrict__ n_active,
                                     bf16 *__restrict__ dst, std::int64_t dst_stride,
                                     std::int64_t blocks) {
  const int g = blockIdx.y;
  if (g >= *n_active) return;
  const std::int64_t first =
      (std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * std::int64_t(kPerWarp);
  if (first >= blocks) return;
  const std::int64_t e = active[g];
  dequantize_warp<F>(src + e * stride, dst + e * dst_stride, first, blocks);
}

unsigned grid_for(std::int64_t blocks) {
  return static_cast<unsigned>((blocks + kBlocksPerCta - 1) / kBlocksPerCta);
}

// fn(std::integral_constant<QuantFormat, F>{}) for F = f when f is Q4_K or Q5_K (the formats
// with a Lane); false, calling nothing, otherwise.
template <typename Fn>
bool with_k4_format(QuantFormat f, Fn &&fn) {
  switch (f) {
    case QuantFormat::kQ4_K:
      fn(std::integral_constant<QuantFormat, QuantFormat::kQ4_K>{});
      return true;
    case QuantFormat::kQ5_K:
      fn(std::integral_constant<QuantFormat, QuantFormat::kQ5_K>{});
      return true;
    default:
      return false;
  }
}

template <typename Out>
bool launch_any(cudaStream_t s, QuantFormat f, const void *src, Out *dst, std::int64_t n) {
  const auto *b = static_cast<const std::uint8_t *>(src);
  const std::int64_t blocks = n / 256;
  return with_k4_format(f, [&](auto fc) {
    dequantize_kquant_kernel<decltype(fc)::value, Out>
        <<<grid_for(blocks), kWarps * 32, 0, s>>>(b, dst, blocks);
  });
}

}  // namespace

bool dequantize_kquant_runs(QuantFormat f, const void *src, const void *dst) {
  // Blocks loaded as 16-byte (head) and 8-byte words, outputs stored as 16-byte words.
  return (f == QuantFormat::kQ4_K || f == QuantFormat::kQ5_K) &&
         reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(dst) % 16 == 0;
}

bool launch_dequantize_kquant(cudaStream_t s, QuantFormat f, const void *src, bf16 *dst,
                              std::int64_t n) {
  return dequantize_kquant_runs(f, src, dst) && launch_any(s, f, src, dst, n);
}
bool launch_dequantize_kquant(cudaStream_t s, QuantFormat f, const void *src, float *dst,
                              std::int64_t n) {
  return dequantize_kquant_runs(f, src, dst) && launch_any(s, f, src, dst, n);
}

bool launch_dequantize_kquant_experts(cudaStream_t s, QuantFormat f, const void *w,
                                      std::size_t stride, std::int64_t n,
                                      const std::int32_t *active, const std::int32_t *n_active,
                                      int max_active, bf16 *dst) {
  // Every expert's blocks start as aligned as the first's (the stride is a multiple of 16),
  // and every expert's output n elements (a multiple of 256) after the last's.
  if (!dequantize_kquant_runs(f, w, dst)) return false;
  const auto *b = static_cast<const std::uint8_t *>(w);
  const std::int64_t blocks = n / 256;
  const dim3 grid(grid_for(blocks), static_cast<unsigned>(max_active));
  return with_k4_format(f, [&](auto fc) {
    dequantize_kquant_experts_kernel<decltype(fc)::value>
        <<<grid, kWarps * 32, 0, s>>>(b, stride, active, n_active, dst, n, blocks);
  });
}

}  // namespace keel::cuda
