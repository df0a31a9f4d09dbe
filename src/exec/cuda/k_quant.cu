// Dequantization and small-M GEMV over GGUF blocks (see k_quant.h). Every format is cut
// into chunks of 32 elements (a Q8_0 / Q4_0 block; an eighth of a Q4_K / Q5_K / Q6_K
// super-block); a chunk decodes to four runs of 8 consecutive elements, so the GEMV reads
// its inputs as 16-byte vectors. Values are computed with the same IEEE operations as
// formats/quant.cpp (explicit _rn intrinsics: no FMA contraction), so the GPU equals the
// CPU reference bit for bit; only the dot product's summation order differs.
#include <cuda_fp16.h>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_bf16x8.cuh"
#include "exec/cuda/k_dequant_kquant.h"
#include "exec/cuda/k_mxfp4.h"
#include "exec/cuda/k_quant.h"

namespace keel::cuda {

namespace {

constexpr int kChunk = 32;  // elements per chunk

struct Chunk {
  float v[4][8];  // four runs of 8 values
  int off[4];     // element offset of each run inside the block
};

__device__ inline float ld_f16(const std::uint8_t *p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short *>(p))));
}
// Eight bytes from a 2-byte aligned address (Q8_0, Q4_0 and Q6_K blocks are not 4-aligned).
__device__ inline void ld_bytes8(const std::uint8_t *p, std::uint8_t out[8]) {
  const unsigned short *h = reinterpret_cast<const unsigned short *>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned short w = __ldg(h + i);
    out[2 * i] = static_cast<std::uint8_t>(w & 0xFF);
    out[2 * i + 1] = static_cast<std::uint8_t>(w >> 8);
  }
}

template <QuantFormat F>
struct Fmt;

template <>
struct Fmt<QuantFormat::kQ8_0> {
  static constexpr int kElems = 32, kBytes = 34, kChunks = 1;
  __device__ static void decode(const std::uint8_t *b, int, Chunk &c) {
    const float d = ld_f16(b);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      std::uint8_t q[8];
      ld_bytes8(b + 2 + 8 * r, q);
      c.off[r] = 8 * r;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        c.v[r][e] = __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(q[e])));
    }
  }
};

template <>
struct Fmt<QuantFormat::kQ4_0> {
  static constexpr int kElems = 32, kBytes = 18, kChunks = 1;
  __device__ static void decode(const std::uint8_t *b, int, Chunk &c) {
    const float d = ld_f16(b);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      std::uint8_t q[8];
      ld_bytes8(b + 2 + 8 * h, q);
      c.off[h] = 8 * h;
      c.off[h + 2] = 16 + 8 * h;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        c.v[h][e] = __fmul_rn(d, static_cast<float>((q[e] & 0xF) - 8));
        c.v[h + 2][e] = __fmul_rn(d, static_cast<float>((q[e] >> 4) - 8));
      }
    }
  }
};

template <>
struct Fmt<QuantFormat::kQ4_K> {
  static constexpr int kElems = 256, kBytes = 144, kChunks = 8;
  // Chunk k: 16 bytes of qs at 16 + 16k; low nibbles are elements 64g + 16h + [0, 16)
  // (sub-block 2g), high nibbles 64g + 32 + 16h + [0, 16) (sub-block 2g + 1), g = k / 2,
  // h = k % 2. Blocks are 144 bytes, so both 16-byte loads are aligned.
  __device__ static void decode(const std::uint8_t *b, int k, Chunk &c) {
    const uint4 head = __ldg(reinterpret_cast<const uint4 *>(b));
    const uint4 qv = __ldg(reinterpret_cast<const uint4 *>(b + 16 + 16 * k));
    const std::uint8_t *hb = reinterpret_cast<const std::uint8_t *>(&head);
    const std::uint8_t *qs = reinterpret_cast<const std::uint8_t *>(&qv);
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(head.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(head.x >> 16)));
    const std::uint8_t *sc = hb + 4;
    const int g = k / 2, h = k % 2;
    float dd[2], mm[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int j = 2 * g + s;
      int scv, mv;
      if (j < 4) {
        scv = sc[j] & 63;
        mv = sc[j + 4] & 63;
      } else {
        scv = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        mv = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      dd[s] = __fmul_rn(d, static_cast<float>(scv));
      mm[s] = __fmul_rn(dmin, static_cast<float>(mv));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      c.off[r] = 64 * g + 16 * h + 8 * r;
      c.off[r + 2] = 64 * g + 32 + 16 * h + 8 * r;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const std::uint8_t q = qs[8 * r + e];
        c.v[r][e] = __fsub_rn(__fmul_rn(dd[0], static_cast<float>(q & 0xF)), mm[0]);
        c.v[r + 2][e] = __fsub_rn(__fmul_rn(dd[1], static_cast<float>(q >> 4)), mm[1]);
      }
    }
  }
};

template <>
struct Fmt<QuantFormat::kQ5_K> {
  static constexpr int kElems = 256, kBytes = 176, kChunks = 8;
  // Q4_K's head (d, dmin, scales) and chunking, with qh[32] at 16 and qs at 48: chunk k
  // (g = k / 2, h = k % 2) takes 16 bytes of qs at 48 + 16k and the fifth bits of the same
  // 16 positions l = 16h + [0, 16) from qh at 16 + 16h: bit 2g for the low nibbles
  // (sub-block 2g), bit 2g + 1 for the high ones. 176-byte blocks: all loads 16-aligned.
  __device__ static void decode(const std::uint8_t *b, int k, Chunk &c) {
    const uint4 head = __ldg(reinterpret_cast<const uint4 *>(b));
    const int g = k / 2, h = k % 2;
    const uint4 hv = __ldg(reinterpret_cast<const uint4 *>(b + 16 + 16 * h));
    const uint4 qv = __ldg(reinterpret_cast<const uint4 *>(b + 48 + 16 * k));
    const std::uint8_t *hb = reinterpret_cast<const std::uint8_t *>(&head);
    const std::uint8_t *qh = reinterpret_cast<const std::uint8_t *>(&hv);
    const std::uint8_t *qs = reinterpret_cast<const std::uint8_t *>(&qv);
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(head.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(head.x >> 16)));
    const std::uint8_t *sc = hb + 4;
    float dd[2], mm[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int j = 2 * g + s;
      int scv, mv;
      if (j < 4) {
        scv = sc[j] & 63;
        mv = sc[j + 4] & 63;
      } else {
        scv = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        mv = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      dd[s] = __fmul_rn(d, static_cast<float>(scv));
      mm[s] = __fmul_rn(dmin, static_cast<float>(mv));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      c.off[r] = 64 * g + 16 * h + 8 * r;
      c.off[r + 2] = 64 * g + 32 + 16 * h + 8 * r;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const std::uint8_t q = qs[8 * r + e], hi = qh[8 * r + e];
        const int lo5 = (q & 0xF) | (((hi >> (2 * g)) & 1) << 4);
        const int hi5 = (q >> 4) | (((hi >> (2 * g + 1)) & 1) << 4);
        c.v[r][e] = __fsub_rn(__fmul_rn(dd[0], static_cast<float>(lo5)), mm[0]);
        c.v[r + 2][e] = __fsub_rn(__fmul_rn(dd[1], static_cast<float>(hi5)), mm[1]);
      }
    }
  }
};

template <>
struct Fmt<QuantFormat::kQ6_K> {
  static constexpr int kElems = 256, kBytes = 210, kChunks = 8;
  // Chunk k: half n = k / 4 (128 elements), l in l0 + [0, 8) with l0 = 8 (k % 4); its
  // runs are elements 128n + l0 + {0, 32, 64, 96} + [0, 8).
  __device__ static void decode(const std::uint8_t *b, int k, Chunk &c) {
    const int n = k / 4, l0 = 8 * (k % 4);
    std::uint8_t qa[8], qb[8], qh[8];
    ld_bytes8(b + 64 * n + l0, qa);        // ql[l]
    ld_bytes8(b + 64 * n + 32 + l0, qb);   // ql[l + 32]
    ld_bytes8(b + 128 + 32 * n + l0, qh);  // qh[l]
    const std::int8_t *scales = reinterpret_cast<const std::int8_t *>(b + 192 + 8 * n);
    const float d = ld_f16(b + 208);
    const int is = l0 / 16;
    float ds[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // Scales sit at an even offset: read the pair holding ours.
      const unsigned short pair =
          __ldg(reinterpret_cast<const unsigned short *>(scales + ((is + 2 * r) & ~1)));
      const std::int8_t s =
          static_cast<std::int8_t>(((is + 2 * r) & 1) ? (pair >> 8) : (pair & 0xFF));
      ds[r] = __fmul_rn(d, static_cast<float>(s));
      c.off[r] = 128 * n + l0 + 32 * r;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int q1 = ((qa[e] & 0xF) | (((qh[e] >> 0) & 3) << 4)) - 32;
      const int q2 = ((qb[e] & 0xF) | (((qh[e] >> 2) & 3) << 4)) - 32;
      const int q3 = ((qa[e] >> 4) | (((qh[e] >> 4) & 3) << 4)) - 32;
      const int q4 = ((qb[e] >> 4) | (((qh[e] >> 6) & 3) << 4)) - 32;
      c.v[0][e] = __fmul_rn(ds[0], static_cast<float>(q1));
      c.v[1][e] = __fmul_rn(ds[1], static_cast<float>(q2));
      c.v[2][e] = __fmul_rn(ds[2], static_cast<float>(q3));
      c.v[3][e] = __fmul_rn(ds[3], static_cast<float>(q4));
    }
  }
};

// Chunk i of the blocks at src to its elements at dst.
template <QuantFormat F, typename Out>
__device__ inline void dequantize_chunk(const std::uint8_t *__restrict__ src, Out *__restrict__ dst,
                                        std::int64_t i) {
  using T = Fmt<F>;
  const std::int64_t blk = i / T::kChunks;
  const int k = static_cast<int>(i % T::kChunks);
  Chunk c;
  T::decode(src + blk * T::kBytes, k, c);
  Out *y = dst + blk * T::kElems;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if constexpr (sizeof(Out) == 4) {
#pragma unroll
      for (int e = 0; e < 8; ++e) y[c.off[r] + e] = c.v[r][e];
    } else {
      uint4 packed;
      __nv_bfloat162 *p2 = reinterpret_cast<__nv_bfloat162 *>(&packed);
#pragma unroll
      for (int e = 0; e < 4; ++e) p2[e] = __floats2bfloat162_rn(c.v[r][2 * e], c.v[r][2 * e + 1]);
      *reinterpret_cast<uint4 *>(y + c.off[r]) = packed;
    }
  }
}

template <QuantFormat F, typename Out>
__global__ void dequantize_kernel(const std::uint8_t *__restrict__ src, Out *__restrict__ dst,
                                  std::int64_t chunks) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < chunks) dequantize_chunk<F>(src, dst, i);
}

// blockIdx.y = g: expert e = active[g] (nothing when g >= *n_active), its blocks at
// src + e * stride bytes to dst + e * dst_stride elements.
template <QuantFormat F>
__global__ void dequantize_experts_kernel(const std::uint8_t *__restrict__ src, std::size_t stride,
                                          const std::int32_t *__restrict__ active,
                                          const std::int32_t *__restrict__ n_active,
                                          bf16 *__restrict__ dst, std::int64_t dst_stride,
                                          std::int64_t chunks) {
  const int g = blockIdx.y;
  if (g >= *n_active) return;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const std::int64_t e = active[g];
  dequantize_chunk<F>(src + e * stride, dst + e * dst_stride, i);
}

constexpr int kWarps = 8;

// One warp per output row; lane i takes chunks i, i + 32, ... of the row, so a warp's
// loads of one step cover 32 consecutive chunks (contiguous bytes for every format).
template <QuantFormat F, int M, bool OutF32>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_quant_kernel(const bf16 *__restrict__ x, const std::uint8_t *__restrict__ w,
                      void *__restrict__ y, std::int64_t ldy, std::int64_t N, std::int64_t K) {
  using T = Fmt<F>;
  const int lane = threadIdx.x % 32;
  const std::int64_t n = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  const std::int64_t blocks = K / T::kElems, chunks = K / kChunk;
  const std::uint8_t *wr = w + n * blocks * T::kBytes;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
#pragma unroll 4
  for (std::int64_t ci = lane; ci < chunks; ci += 32) {
    const std::int64_t blk = ci / T::kChunks;
    Chunk c;
    T::decode(wr + blk * T::kBytes, static_cast<int>(ci % T::kChunks), c);
    const bf16 *xb = x + blk * T::kElems;
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float xf[8];
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4 *>(xb + m * K + c.off[r])), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[m] = fmaf(c.v[r][e], xf[e], acc[m]);
      }
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

// gemv_quant_kernel at M = 1 with a slot per blockIdx.y: weights of expert ids[slot] at
// w + ids[slot] * stride (an id outside [0, experts): a zero row), x row slot / slots_per_x.
template <QuantFormat F, bool OutF32>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_quant_experts_kernel(const bf16 *__restrict__ x, std::int64_t ldx, int slots_per_x,
                              const std::uint8_t *__restrict__ w, std::size_t stride, int experts,
                              const std::int32_t *__restrict__ ids, void *__restrict__ y,
                              std::int64_t ldy, std::int64_t N, std::int64_t K) {
  using T = Fmt<F>;
  const int lane = threadIdx.x % 32;
  const std::int64_t n = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  const int slot = blockIdx.y;
  const int e = ids[slot];
  float acc = 0.0f;
  if (e >= 0 && e < experts) {
    const std::int64_t blocks = K / T::kElems, chunks = K / kChunk;
    const std::uint8_t *wr = w + std::size_t(e) * stride + n * blocks * T::kBytes;
    const bf16 *xs = x + std::int64_t(slot / slots_per_x) * ldx;
#pragma unroll 4
    for (std::int64_t ci = lane; ci < chunks; ci += 32) {
      const std::int64_t blk = ci / T::kChunks;
      Chunk c;
      T::decode(wr + blk * T::kBytes, static_cast<int>(ci % T::kChunks), c);
      const bf16 *xb = xs + blk * T::kElems;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float xf[8];
        bf16x8_to_float(__ldg(reinterpret_cast<const uint4 *>(xb + c.off[r])), xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc = fmaf(c.v[r][i], xf[i], acc);
      }
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

template <QuantFormat F>
void gemv_experts_f(cudaStream_t s, dim3 grid, const bf16 *x, std::int64_t ldx, int slots_per_x,
                    const void *w, std::size_t stride, int experts, const std::int32_t *ids,
                    void *y, bool y_f32, std::int64_t ldy, std::int64_t N, std::int64_t K) {
  const auto *wb = static_cast<const std::uint8_t *>(w);
  if (y_f32)
    gemv_quant_experts_kernel<F, true>
        <<<grid, kWarps * 32, 0, s>>>(x, ldx, slots_per_x, wb, stride, experts, ids, y, ldy, N, K);
  else
    gemv_quant_experts_kernel<F, false>
        <<<grid, kWarps * 32, 0, s>>>(x, ldx, slots_per_x, wb, stride, experts, ids, y, ldy, N, K);
}

template <QuantFormat F>
void dequant_experts_f(cudaStream_t s, const void *w, std::size_t stride, std::int64_t n,
                       const std::int32_t *active, const std::int32_t *n_active, int max_active,
                       bf16 *dst) {
  if (launch_dequantize_kquant_experts(s, F, w, stride, n, active, n_active, max_active, dst))
    return;
  const std::int64_t chunks = n / kChunk;
  const dim3 grid(static_cast<unsigned>((chunks + 255) / 256), static_cast<unsigned>(max_active));
  dequantize_experts_kernel<F><<<grid, 256, 0, s>>>(static_cast<const std::uint8_t *>(w), stride,
                                                    active, n_active, dst, n, chunks);
}

template <QuantFormat F, int M>
void gemv_m(cudaStream_t s, const bf16 *x, const void *w, void *y, bool y_f32, std::int64_t ldy,
            std::int64_t N, std::int64_t K) {
  const unsigned grid = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  const auto *wb = static_cast<const std::uint8_t *>(w);
  if (y_f32)
    gemv_quant_kernel<F, M, true><<<grid, kWarps * 32, 0, s>>>(x, wb, y, ldy, N, K);
  else
    gemv_quant_kernel<F, M, false><<<grid, kWarps * 32, 0, s>>>(x, wb, y, ldy, N, K);
}

template <QuantFormat F>
void gemv_f(cudaStream_t s, const bf16 *x, const void *w, void *y, bool y_f32, std::int64_t ldy,
            int M, std::int64_t N, std::int64_t K) {
  switch (M) {
    case 1:
      return gemv_m<F, 1>(s, x, w, y, y_f32, ldy, N, K);
    case 2:
      return gemv_m<F, 2>(s, x, w, y, y_f32, ldy, N, K);
    case 3:
      return gemv_m<F, 3>(s, x, w, y, y_f32, ldy, N, K);
    case 4:
      return gemv_m<F, 4>(s, x, w, y, y_f32, ldy, N, K);
    case 5:
      return gemv_m<F, 5>(s, x, w, y, y_f32, ldy, N, K);
    case 6:
      return gemv_m<F, 6>(s, x, w, y, y_f32, ldy, N, K);
    case 7:
      return gemv_m<F, 7>(s, x, w, y, y_f32, ldy, N, K);
    default:
      return gemv_m<F, 8>(s, x, w, y, y_f32, ldy, N, K);
  }
}

// K-quants take the warp-per-super-block kernel (k_dequant_kquant.h) where it runs the
// addresses; the rest, the chunk kernel.
template <QuantFormat F, typename Out>
void dequant_f(cudaStream_t s, const void *src, Out *dst, std::int64_t n) {
  if (launch_dequantize_kquant(s, F, src, dst, n)) return;
  const std::int64_t chunks = n / kChunk;
  const unsigned grid = static_cast<unsigned>((chunks + 255) / 256);
  dequantize_kernel<F, Out>
      <<<grid, 256, 0, s>>>(static_cast<const std::uint8_t *>(src), dst, chunks);
}

template <typename Out>
void dequant_any(cudaStream_t s, QuantFormat f, const void *src, Out *dst, std::int64_t n) {
  if (n <= 0) return;
  if (n % quant_block_elems(f) != 0 || (n / kChunk) > std::int64_t(0x7fffffff) * 256)
    throw Error(ErrorCode::kInvalidArgument,
                "dequantize: " + std::to_string(n) + " elements is not a whole number of blocks");
  switch (f) {
    case QuantFormat::kQ8_0:
      dequant_f<QuantFormat::kQ8_0>(s, src, dst, n);
      break;
    case QuantFormat::kQ4_0:
      dequant_f<QuantFormat::kQ4_0>(s, src, dst, n);
      break;
    case QuantFormat::kQ4_K:
      dequant_f<QuantFormat::kQ4_K>(s, src, dst, n);
      break;
    case QuantFormat::kQ5_K:
      dequant_f<QuantFormat::kQ5_K>(s, src, dst, n);
      break;
    case QuantFormat::kQ6_K:
      dequant_f<QuantFormat::kQ6_K>(s, src, dst, n);
      break;
    case QuantFormat::kMXFP4:  // forwarded before this point (k_mxfp4.cu)
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("dequantize");
}

}  // namespace

int quant_block_elems(QuantFormat f) {
  switch (f) {
    case QuantFormat::kQ8_0:
      return Fmt<QuantFormat::kQ8_0>::kElems;
    case QuantFormat::kQ4_0:
      return Fmt<QuantFormat::kQ4_0>::kElems;
    case QuantFormat::kQ4_K:
      return Fmt<QuantFormat::kQ4_K>::kElems;
    case QuantFormat::kQ5_K:
      return Fmt<QuantFormat::kQ5_K>::kElems;
    case QuantFormat::kQ6_K:
      return Fmt<QuantFormat::kQ6_K>::kElems;
    case QuantFormat::kMXFP4:
      return 32;
  }
  return 1;
}

int quant_block_bytes(QuantFormat f) {
  switch (f) {
    case QuantFormat::kQ8_0:
      return Fmt<QuantFormat::kQ8_0>::kBytes;
    case QuantFormat::kQ4_0:
      return Fmt<QuantFormat::kQ4_0>::kBytes;
    case QuantFormat::kQ4_K:
      return Fmt<QuantFormat::kQ4_K>::kBytes;
    case QuantFormat::kQ5_K:
      return Fmt<QuantFormat::kQ5_K>::kBytes;
    case QuantFormat::kQ6_K:
      return Fmt<QuantFormat::kQ6_K>::kBytes;
    case QuantFormat::kMXFP4:
      return 17;
  }
  return 1;
}

void launch_dequantize(StreamRef s_ref, QuantFormat f, const void *src, bf16 *dst, std::int64_t n) {
  if (f == QuantFormat::kMXFP4) return launch_dequantize_mxfp4(s_ref, src, dst, n);
  dequant_any(s_ref.get("launch_dequantize"), f, src, dst, n);
}

void launch_dequantize_f32(StreamRef s_ref, QuantFormat f, const void *src, float *dst,
                           std::int64_t n) {
  if (f == QuantFormat::kMXFP4) return launch_dequantize_mxfp4_f32(s_ref, src, dst, n);
  dequant_any(s_ref.get("launch_dequantize_f32"), f, src, dst, n);
}

void launch_gemv_quant(StreamRef s_ref, QuantFormat f, const bf16 *x, const void *w, void *y,
                       bool y_f32, std::int64_t ldy, int M, std::int64_t N, std::int64_t K) {
  if (f == QuantFormat::kMXFP4) return launch_gemv_mxfp4(s_ref, x, w, y, y_f32, ldy, M, N, K);
  const cudaStream_t s = s_ref.get("launch_gemv_quant");
  if (N <= 0) return;
  if (M < 1 || M > kQuantGemvMaxM || K <= 0 || K % quant_block_elems(f) != 0 || ldy < N ||
      reinterpret_cast<std::uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(w) % 16 != 0 || N > std::int64_t(0x7fffffff) * kWarps)
    throw Error(ErrorCode::kInvalidArgument,
                "gemv_quant: unsupported shape M=" + std::to_string(M) + " N=" + std::to_string(N) +
                    " K=" + std::to_string(K));
  switch (f) {
    case QuantFormat::kQ8_0:
      gemv_f<QuantFormat::kQ8_0>(s, x, w, y, y_f32, ldy, M, N, K);
      break;
    case QuantFormat::kQ4_0:
      gemv_f<QuantFormat::kQ4_0>(s, x, w, y, y_f32, ldy, M, N, K);
      break;
    case QuantFormat::kQ4_K:
      gemv_f<QuantFormat::kQ4_K>(s, x, w, y, y_f32, ldy, M, N, K);
      break;
    case QuantFormat::kQ5_K:
      gemv_f<QuantFormat::kQ5_K>(s, x, w, y, y_f32, ldy, M, N, K);
      break;
    case QuantFormat::kQ6_K:
      gemv_f<QuantFormat::kQ6_K>(s, x, w, y, y_f32, ldy, M, N, K);
      break;
    case QuantFormat::kMXFP4:  // forwarded above
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("gemv_quant");
}

void launch_gemv_quant_experts(StreamRef s_ref, QuantFormat f, const bf16 *x, std::int64_t ldx,
                               int slots_per_x, const void *w_base, std::size_t expert_stride,
                               int experts, const std::int32_t *ids, int slots, void *y, bool y_f32,
                               std::int64_t ldy, std::int64_t N, std::int64_t K) {
  if (f == QuantFormat::kMXFP4)
    return launch_gemv_mxfp4_experts(s_ref, x, ldx, slots_per_x, w_base, expert_stride, experts,
                                     ids, slots, y, y_f32, ldy, N, K);
  const cudaStream_t s = s_ref.get("launch_gemv_quant_experts");
  if (N <= 0 || slots <= 0) return;
  const std::size_t row_bytes =
      static_cast<std::size_t>(K / quant_block_elems(f) * quant_block_bytes(f));
  if (K <= 0 || K % quant_block_elems(f) != 0 || ldy < N || ldx < K || ldx % 8 != 0 ||
      slots > 65535 || slots_per_x < 1 || experts < 1 || !ids || expert_stride % 16 != 0 ||
      expert_stride < N * row_bytes || reinterpret_cast<std::uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(w_base) % 16 != 0 || N > std::int64_t(0x7fffffff) * kWarps)
    throw Error(ErrorCode::kInvalidArgument, "gemv_quant_experts: unsupported shape N=" +
                                                 std::to_string(N) + " K=" + std::to_string(K));
  const dim3 grid(static_cast<unsigned>((N + kWarps - 1) / kWarps), static_cast<unsigned>(slots));
  switch (f) {
#define KEEL_QUANT_EXPERTS_CASE(F)                                                                 \
  case F:                                                                                          \
    gemv_experts_f<F>(s, grid, x, ldx, slots_per_x, w_base, expert_stride, experts, ids, y, y_f32, \
                      ldy, N, K);                                                                  \
    break;
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ8_0)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ4_0)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ4_K)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ5_K)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ6_K)
#undef KEEL_QUANT_EXPERTS_CASE
    case QuantFormat::kMXFP4:  // forwarded above
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("gemv_quant_experts");
}

void launch_dequantize_quant_experts(StreamRef s_ref, QuantFormat f, const void *w_base,
                                     std::size_t expert_stride, std::int64_t n,
                                     const std::int32_t *active, const std::int32_t *n_active,
                                     int max_active, bf16 *dst) {
  if (f == QuantFormat::kMXFP4)
    return launch_dequantize_mxfp4_experts(s_ref, w_base, expert_stride, n, active, n_active,
                                           max_active, dst);
  const cudaStream_t s = s_ref.get("launch_dequantize_quant_experts");
  if (n <= 0 || max_active <= 0) return;
  if (n % quant_block_elems(f) != 0 || max_active > 65535 || !active || !n_active ||
      (n / kChunk + 255) / 256 > 0x7fffffff || reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      expert_stride % 16 != 0 ||
      expert_stride < static_cast<std::size_t>(n / quant_block_elems(f) * quant_block_bytes(f)))
    throw Error(ErrorCode::kInvalidArgument, "dequantize_quant_experts: bad shape (" +
                                                 std::to_string(n) + " elements per expert)");
  switch (f) {
#define KEEL_QUANT_EXPERTS_CASE(F)                                                        \
  case F:                                                                                 \
    dequant_experts_f<F>(s, w_base, expert_stride, n, active, n_active, max_active, dst); \
    break;
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ8_0)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ4_0)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ4_K)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ5_K)
    KEEL_QUANT_EXPERTS_CASE(QuantFormat::kQ6_K)
#undef KEEL_QUANT_EXPERTS_CASE
    case QuantFormat::kMXFP4:
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("dequantize_quant_experts");
}

}  // namespace keel::cuda
