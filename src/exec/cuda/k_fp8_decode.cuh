// e4m3 decoding shared by the FP8 GEMV / dequantize kernels (k_fp8.cu) and the experts'
// low-bit grouped GEMM (k_moe_grouped_lowbit.cu), so every path gives the same values
// bit for bit (formats/quant.cpp's dequantize_fp8_row).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace keel::cuda::fp8 {

// Four e4m3 bytes of `w` to floats, exactly; the portable path gives value / 256
// (convert_factor says what to multiply by).
template <bool Portable>
__device__ inline void e4m3x4(unsigned w, float f[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  constexpr bool kHardware = !Portable;
#else
  constexpr bool kHardware = false;
#endif
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    float2 v;
    if constexpr (kHardware) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>((w >> (16 * p)) & 0xFFFF), __NV_E4M3);
      v = __half22float2(*reinterpret_cast<const __half2 *>(&h));
    } else {
      // Bytes 2p and 2p + 1 to the high byte of each 16-bit half, then into f16 position.
      const unsigned t = __byte_perm(w, 0u, p == 0 ? 0x1404u : 0x3424u);
      const unsigned h = (t & 0x80008000u) | ((t >> 1) & 0x3F803F80u);
      v = __half22float2(*reinterpret_cast<const __half2 *>(&h));
    }
    f[2 * p] = v.x;
    f[2 * p + 1] = v.y;
  }
}

// What the converted floats must be multiplied by to be the e4m3 values.
template <bool Portable>
__device__ constexpr float convert_factor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return Portable ? 256.0f : 1.0f;
#else
  return 256.0f;
#endif
}

// 16 e4m3 bytes times their block scale, as formats/quant.cpp computes them: the exact
// e4m3 value (NaN for the 0x7F / 0xFF codes) times s, one rounding.
template <bool Portable>
__device__ inline void dequantize16(const uint4 &raw, float s, float f[16]) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    e4m3x4<Portable>(words[i], f + 4 * i);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned b = (words[i] >> (8 * j)) & 0x7F;
      float x = __fmul_rn(f[4 * i + j], convert_factor<Portable>());  // exact
      if (b == 0x7F) x = __int_as_float(0x7FC00000);                  // the NaN codes
      f[4 * i + j] = __fmul_rn(x, s);
    }
  }
}

}  // namespace keel::cuda::fp8
