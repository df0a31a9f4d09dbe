// Device helpers shared by the two integer-dot GEMVs over GGUF blocks (k_qgemv.h): the
// dp4a kernel (k_qgemv.cu) and the tensor-core one (k_qgemv_mma.cu): block field loads
// (Q8_0 / Q4_0 / Q6_K blocks are only 2-byte aligned), the K-quant scale/min unpacking, and
// the fused decode path's epilogues.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_qgemv.h"

namespace keel::cuda::qgemv_detail {

__device__ __forceinline__ float f16_bits(unsigned bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xFFFF)));
}
__device__ __forceinline__ unsigned ld_u16(const std::uint8_t *p) {
  return __ldg(reinterpret_cast<const unsigned short *>(p));
}
// Four bytes from a 2-byte aligned address.
__device__ __forceinline__ int ld_i32_a2(const std::uint8_t *p) {
  return static_cast<int>(ld_u16(p) | (ld_u16(p + 2) << 16));
}
// Four bytes at a 2-byte aligned address: one load where it is 4-byte aligned (a Q6_K
// block at an even index of a row whose start is), two halves otherwise.
__device__ __forceinline__ unsigned ld_u32_a2(const std::uint8_t *p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 3) == 0
             ? __ldg(reinterpret_cast<const unsigned *>(p))
             : static_cast<unsigned>(ld_i32_a2(p));
}
__device__ __forceinline__ int byte_of(unsigned v, int i) {
  return static_cast<int>((v >> (8 * i)) & 0xFF);
}
// c as a float, exactly, for |c| < 2^22: 1.5 x 2^23 + c keeps c in the mantissa. An integer add
// and a float subtract (full-rate pipes) instead of I2F (a quarter of the FMA rate on
// sm_80-sm_90).
__device__ __forceinline__ float small_int_to_float(int c) {
  return __fsub_rn(__int_as_float(0x4B400000 + c), 12582912.0f);
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from the
// head's words y (scales[0..3]), z (scales[4..7]), w (scales[8..11]).
__device__ __forceinline__ void k_scale_min(const uint4 &head, int j, int &sc, int &mn) {
  if (j < 4) {
    sc = byte_of(head.y, j) & 63;
    mn = byte_of(head.z, j) & 63;
  } else {
    const int i = j - 4;
    sc = (byte_of(head.w, i) & 0xF) | ((byte_of(head.y, i) >> 6) << 4);
    mn = (byte_of(head.w, i) >> 4) | ((byte_of(head.z, i) >> 6) << 4);
  }
}

// One lane's 8 input values of a 32-value block (held by 4 consecutive lanes) quantized to
// int8 against the block's max |x| (shuffled across the 4 lanes, which must all call it):
// the packed codes, the block's scale d and the sum of its int8 codes. The block's sum is d
// times the sum of its int8 codes, not of the values: the K-quant min term then cancels
// exactly against the integer dot (which sees the int8 codes), so the product is the
// weights times the rounded input. With the sum of the unrounded values the rounding errors
// of d * sc * q (whose mean is the sub-block's min) were left uncancelled: 2-4x the error
// (0.017-0.026 on the H200).
struct Q8Lane {
  unsigned packed[2];
  float d;
  int isum;
};
__device__ __forceinline__ Q8Lane quantize_q8_lane(const float v[8]) {
  Q8Lane r;
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  r.d = amax / 127.0f;
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  r.isum = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    unsigned w = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q = __float2int_rn(v[4 * h + e] * id);
      r.isum += q;
      w |= (static_cast<unsigned>(q) & 0xFF) << (8 * e);
    }
    r.packed[h] = w;
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) r.isum += __shfl_xor_sync(0xffffffffu, r.isum, o);
  return r;
}

// A Q4_K / Q5_K super-block (144 / 176 bytes, 16-byte aligned) as a lane of the dequantizing
// tensor-core GEMM (k_qgemm_bf16.cu) holds it for its rows g and g + 8 (h = 0, 1): the head
// (d, dmin, the 12 scale bytes), qs bytes 32i + 16k + 4t (run i = 0..3, k = 0..1) -- low nibbles
// values 64i + 16k + 4t..+3 (sub-block 2i), high nibbles the same + 32 (sub-block 2i + 1) -- and
// for Q5_K qh bytes 16k + 4t, whose bits 2i / 2i + 1 are those values' fifth bits.
template <bool kQ5>
struct K4Lane {
  static constexpr int kBytes = kQ5 ? 176 : 144, kQs = kQ5 ? 48 : 16;
  uint4 head[2];
  unsigned qs[2][4][2];
  unsigned qh[2][2];  // Q5_K only
  // From a copy of the step's bytes in shared memory (16-byte aligned rows).
  __device__ __forceinline__ void load_shared(const std::uint8_t *const (&rows)[2], int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t *b = rows[h];
      head[h] = *reinterpret_cast<const uint4 *>(b);
      if constexpr (kQ5)
#pragma unroll
        for (int k = 0; k < 2; ++k)
          qh[h][k] = *reinterpret_cast<const unsigned *>(b + 16 + 16 * k + 4 * t);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int k = 0; k < 2; ++k)
          qs[h][i][k] = *reinterpret_cast<const unsigned *>(b + kQs + 32 * i + 16 * k + 4 * t);
    }
  }
  // Row h's codes (0..15, Q5_K 0..31 a byte) of run i, half k, sub-block 2i + hi.
  __device__ __forceinline__ unsigned codes(int h, int i, int k, int hi) const {
    unsigned c = hi ? (qs[h][i][k] >> 4) & 0x0F0F0F0Fu : qs[h][i][k] & 0x0F0F0F0Fu;
    if constexpr (kQ5) c |= ((qh[h][k] >> (2 * i + hi)) & 0x01010101u) << 4;
    return c;
  }
};

// A Q6_K block (210 bytes, 2-byte aligned) as a lane of the tensor-core kernels (k_qgemv_mma.cu,
// k_qgemm_bf16.cu) holds it for its rows g and g + 8 (h = 0, 1): ql bytes 16j + 4t (j = 0..7), qh
// bytes 128 + 16j + 4t (j = 0..3), the 16 scales and d. Run (n, r, hh) -- values 128n + 32r +
// 16hh + [0, 16), scale sc[8n + 2r + hh] -- is, for the lane, the codes of values 4t..4t+3 of
// the run: ql word 4n + 2 (r % 2) + hh (nibble r / 2), qh word 2n + hh (bits 2r, 2r + 1), minus
// 32 -- a k16 MMA's A word.
struct Q6kLane {
  unsigned ql[2][8], qh[2][4], sc[2][4], d[2];
  __device__ __forceinline__ void load(const std::uint8_t *const (&rows)[2], int u, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t *b = rows[h] + static_cast<std::size_t>(u) * 210;
#pragma unroll
      for (int j = 0; j < 8; ++j) ql[h][j] = ld_u32_a2(b + 16 * j + 4 * t);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        qh[h][j] = ld_u32_a2(b + 128 + 16 * j + 4 * t);
        sc[h][j] = ld_u32_a2(b + 192 + 4 * j);
      }
      d[h] = ld_u16(b + 208);
    }
  }
  // The same from a copy of the block in shared memory at a 2-byte aligned address.
  __device__ __forceinline__ void load_shared(const std::uint8_t *const (&rows)[2], int t) {
    auto u32 = [](const std::uint8_t *q) {
      return (reinterpret_cast<std::uintptr_t>(q) & 3) == 0
                 ? *reinterpret_cast<const unsigned *>(q)
                 : static_cast<unsigned>(*reinterpret_cast<const unsigned short *>(q)) |
                       (static_cast<unsigned>(*reinterpret_cast<const unsigned short *>(q + 2))
                        << 16);
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t *b = rows[h];
#pragma unroll
      for (int j = 0; j < 8; ++j) ql[h][j] = u32(b + 16 * j + 4 * t);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        qh[h][j] = u32(b + 128 + 16 * j + 4 * t);
        sc[h][j] = u32(b + 192 + 4 * j);
      }
      d[h] = *reinterpret_cast<const unsigned short *>(b + 208);
    }
  }
  // The codes as stored (0..63 a byte).
  __device__ __forceinline__ unsigned ucodes(int h, int n, int r, int hh) const {
    const unsigned wl = ql[h][4 * n + 2 * (r % 2) + hh], wh = qh[h][2 * n + hh];
    const unsigned lo = r < 2 ? wl & 0x0F0F0F0Fu : (wl >> 4) & 0x0F0F0F0Fu;
    return lo | (((wh >> (2 * r)) & 0x03030303u) << 4);
  }
  __device__ __forceinline__ unsigned codes(int h, int n, int r, int hh) const {
    return __vsub4(ucodes(h, n, r, hh), 0x20202020u);
  }
  __device__ __forceinline__ int scale(int h, int n, int r, int hh) const {
    return static_cast<std::int8_t>(byte_of(sc[h][2 * n + r / 2], 2 * (r % 2) + hh));
  }
};

// Part s (0..3: values 8s..8s+7) of a 32-value block into its 32-byte record of the
// tensor-core kernels' staged input (k_qgemv_mma.cu's StagedMma, k_qgemm.cu): in value order,
// or `perm`uted so that value v sits at 8 ((v % 16) / 4) + 4 (v / 16) + v % 4, where lane t
// of an MMA reads values 4t..4t+3 and 16 + 4t..16 + 4t + 3 as its 8 bytes at 8t.
__device__ __forceinline__ void store_q8_record_part(std::int8_t *rec, int s, const Q8Lane &q8,
                                                     bool perm) {
  if (perm) {  // values 8s..8s+3 and 8s+4..8s+7
    *reinterpret_cast<unsigned *>(rec + 16 * (s % 2) + 4 * (s / 2)) = q8.packed[0];
    *reinterpret_cast<unsigned *>(rec + 16 * (s % 2) + 8 + 4 * (s / 2)) = q8.packed[1];
  } else {
    *reinterpret_cast<uint2 *>(rec + 8 * s) = make_uint2(q8.packed[0], q8.packed[1]);
  }
}

// Output element `at` (= m * ldy + n): a = W[n] x[m], b = W[n + rows] x[m] (kSwiglu).
__device__ __forceinline__ void store_output(const QgemvParams &p, std::int64_t at, float a,
                                             float b) {
  switch (p.out) {
    case GemvOut::kF32:
      static_cast<float *>(p.y)[at] = a;
      break;
    case GemvOut::kBf16:
      static_cast<bf16 *>(p.y)[at] = __float2bfloat16(a);
      break;
    case GemvOut::kAddResidual:
      static_cast<float *>(p.y)[at] += __bfloat162float(__float2bfloat16(a));
      break;
    case GemvOut::kSwiglu: {  // gate and up rounded to bf16 first, as launch_swiglu reads them
      const float g = __bfloat162float(__float2bfloat16(a));
      const float u = __bfloat162float(__float2bfloat16(b));
      static_cast<bf16 *>(p.y)[at] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
      break;
    }
  }
}

// fn(std::integral_constant<QuantFormat, f>{}) for the GGUF format f (nothing for MXFP4, which
// no integer-dot GEMV takes): one place that turns the run-time format into a kernel's.
template <typename Fn>
void dispatch_format(QuantFormat f, Fn &&fn) {
  switch (f) {
    case QuantFormat::kQ8_0:
      return fn(std::integral_constant<QuantFormat, QuantFormat::kQ8_0>{});
    case QuantFormat::kQ4_0:
      return fn(std::integral_constant<QuantFormat, QuantFormat::kQ4_0>{});
    case QuantFormat::kQ4_K:
      return fn(std::integral_constant<QuantFormat, QuantFormat::kQ4_K>{});
    case QuantFormat::kQ5_K:
      return fn(std::integral_constant<QuantFormat, QuantFormat::kQ5_K>{});
    case QuantFormat::kQ6_K:
      return fn(std::integral_constant<QuantFormat, QuantFormat::kQ6_K>{});
    case QuantFormat::kMXFP4:
      return;
  }
}
// fn(std::integral_constant<int, M>{}) for 1 <= M <= kQgemvMaxM (larger M: kQgemvMaxM).
template <typename Fn>
void dispatch_rows(int M, Fn &&fn) {
  static_assert(kQgemvMaxM == 8);
  switch (M) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    case 5:
      return fn(std::integral_constant<int, 5>{});
    case 6:
      return fn(std::integral_constant<int, 6>{});
    case 7:
      return fn(std::integral_constant<int, 7>{});
    default:
      return fn(std::integral_constant<int, 8>{});
  }
}

// The tensor-core kernel (k_qgemv_mma.cu) for a shape launch_qgemv has checked.
void launch_qgemv_mma(cudaStream_t s, const QgemvParams &p, int num_sms);
// The streamed dp4a kernel (k_qgemv_stream.cu) for a shape qgemv_stream_supported takes.
void launch_qgemv_stream(cudaStream_t s, const QgemvParams &p, int num_sms);

}  // namespace keel::cuda::qgemv_detail
