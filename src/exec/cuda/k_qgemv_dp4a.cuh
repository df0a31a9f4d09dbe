// The dp4a integer-dot GEMV's per-format parts (k_qgemv.h), shared by its two kernels: the
// register kernel (k_qgemv.cu: a lane's units loaded from global memory into registers, one
// chunk ahead) and the streamed one (k_qgemv_stream.cu: a warp's chunks copied by cp.async
// into a ring in shared memory, several ahead). QDot<F>::load reads a unit's bytes from global
// memory (kShared = false, read-only cache) or from a chunk in shared memory (true); dot()
// is the same arithmetic either way, so the two kernels give the same bits.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_qgemv_common.cuh"

namespace keel::cuda::qgemv_detail {

// A 2-byte field from global memory (read-only path) or shared memory.
template <bool kShared>
__device__ __forceinline__ unsigned ld16(const std::uint8_t *p) {
  if constexpr (kShared)
    return *reinterpret_cast<const unsigned short *>(p);
  else
    return ld_u16(p);
}
template <bool kShared>
__device__ __forceinline__ int ld32_a2(const std::uint8_t *p) {
  return static_cast<int>(ld16<kShared>(p) | (ld16<kShared>(p + 2) << 16));
}
template <bool kShared>
__device__ __forceinline__ uint4 ld128(const std::uint8_t *p) {
  if constexpr (kShared)
    return *reinterpret_cast<const uint4 *>(p);
  else
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;                    // units in flight per lane
constexpr std::size_t kMaxSmem = 200 * 1024;  // of the H200's 227 KB per block
// Default grid cap, in blocks per SM slot: one wave, so every block stages its input once
// and its warps loop over rows (bench/RESULTS.md: 1 beat 2 and 4 at every shape and M).
constexpr int kWaves = 1;

// A warp's work is a sequence of chunks of kPerChunk units (kUnroll a lane): over its rows
// first, first + stride, ..., over the gate and up row of each for SwiGLU (part 0, 1), over
// the row's units. Positions advance by counting: no 64-bit division per chunk.
struct ChunkPos {
  std::int64_t row = 0, c = 0;  // row index in the warp's sequence, chunk in the row
  int part = 0;
};
struct ChunkSeq {
  static constexpr std::int64_t kPerChunk = 32 * kUnroll;
  std::int64_t chunks_per_row, total;
  int parts;
  __device__ ChunkSeq(std::int64_t units, std::int64_t rows, std::int64_t first,
                      std::int64_t stride, bool swiglu)
      : chunks_per_row((units + kPerChunk - 1) / kPerChunk), parts(swiglu ? 2 : 1) {
    const std::int64_t my_rows = first < rows ? (rows - 1 - first) / stride + 1 : 0;
    total = my_rows * parts * chunks_per_row;
  }
  __device__ void advance(ChunkPos &a) const {
    if (++a.c < chunks_per_row) return;
    a.c = 0;
    if (++a.part < parts) return;
    a.part = 0;
    ++a.row;
  }
};

// After chunk `done` of a warp's sequence: where it completes a row (or a SwiGLU part), the
// row's sums over the warp; a gate part is kept for its up row, otherwise lane m writes input
// m's output of row n and the sums restart.
template <int M>
__device__ __forceinline__ void finish_chunk(const QgemvParams &p, const ChunkSeq &seq,
                                             const ChunkPos &done, std::int64_t n, std::int64_t ldy,
                                             float (&acc)[M], float (&gate)[M]) {
  if (done.c + 1 < seq.chunks_per_row) return;
  const int lane = threadIdx.x % 32;
  const bool swiglu = seq.parts == 2;
#pragma unroll
  for (int m = 0; m < M; ++m)
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
  if (swiglu && done.part == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) gate[m] = acc[m], acc[m] = 0.0f;
    return;
  }
  if (lane < M) {
    float a = swiglu ? gate[0] : acc[0], b = acc[0];
#pragma unroll
    for (int m = 1; m < M; ++m)
      if (lane == m) a = swiglu ? gate[m] : acc[m], b = acc[m];
    store_output(p, std::int64_t(lane) * ldy + n, a, swiglu ? b : 0.0f);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
}

// The block's weights, input row and output row: p's own, or its expert slot's
// (QgemvParams::expert_ids; blockIdx.y = the slot). `valid` is false for an expert id outside
// [0, experts): the slot's outputs are zeros.
struct SlotView {
  const std::uint8_t *w;
  std::int64_t x_off, y_off;
  bool valid;
};
__device__ __forceinline__ SlotView slot_view(const QgemvParams &p) {
  const auto *w = static_cast<const std::uint8_t *>(p.w);
  if (!p.expert_ids) return {w, 0, 0, true};
  const int s = static_cast<int>(blockIdx.y);
  const int e = p.expert_ids[s];
  const bool valid = e >= 0 && e < p.experts;
  const std::int64_t ldx = p.ldx > 0 ? p.ldx : p.K;
  return {w + (valid ? e * p.expert_stride : 0), std::int64_t(s / p.slots_per_x) * ldx,
          std::int64_t(s) * (p.ldy > 0 ? p.ldy : p.N), valid};
}
// An invalid slot's rows (those of this warp: first, first + stride, ...): zeros.
__device__ __forceinline__ void zero_slot(const QgemvParams &p, const SlotView &v,
                                          std::int64_t first, std::int64_t stride) {
  if (threadIdx.x % 32 != 0) return;
  for (std::int64_t n = first; n < p.N; n += stride) store_output(p, v.y_off + n, 0.0f, 0.0f);
}

// The staged input: xq [M][K] int8, then xds [M][K / 32] (scale d, d x the sum of the
// 32 int8 codes).
// The staged int8 input of one row is unit-major, not in element order: a lane reads its
// unit's codes as consecutive 16-byte halves (8-byte runs for Q6_K), so the 8 lanes of a
// shared-memory phase read 128 consecutive bytes, free of bank conflicts (in element order
// lanes 0 and 4 of a K-quant super-block hit the same banks: 2-way conflicts, and the
// M > 1 GEMV is bound by shared-memory bandwidth). Per row of K values, kb = K / 32 units:
//   Q8_0 / Q4_0 / Q4_K / Q5_K: half h (0: the low nibbles' / first 16 values, 1: the high
//     nibbles' / last 16) of unit u at h * 16 kb + 16 u;
//   Q6_K: run r (0..3, the values 32 r + [0, 8) of the unit's 128-value half) of unit u at
//     r * 8 kb + 8 u.
// staged_pos<F>(e, kb) is where the 8 values from element e (a multiple of 8) go.
template <QuantFormat F>
__device__ __forceinline__ int staged_pos(int e, int kb) {
  if constexpr (F == QuantFormat::kQ8_0 || F == QuantFormat::kQ4_0) {
    const int u = e / 32, h = (e % 32) / 16, sub = (e % 16) / 8;
    return h * 16 * kb + 16 * u + 8 * sub;
  } else if constexpr (F == QuantFormat::kQ6_K) {
    const int blk = e / 256, eb = e % 256, n = eb / 128, r = eb % 128;
    const int u = blk * 8 + 4 * n + (r % 32) / 8;
    return (r / 32) * 8 * kb + 8 * u;
  } else {  // Q4_K / Q5_K: unit 2g + h of a super-block, values 64 g + 32 hi + 16 h + [0, 16)
    const int blk = e / 256, eb = e % 256, g = eb / 64, r = eb % 64;
    const int hi = r / 32, h = (r % 32) / 16, sub = (r % 16) / 8;
    return hi * 16 * kb + 16 * (blk * 8 + 2 * g + h) + 8 * sub;
  }
}

// K fits 32 bits (the staged input is at most kMaxSmem bytes): the offsets into it are
// 32-bit integer math in the inner loop.
struct Staged {
  const std::int8_t *xq;
  const float2 *xds;
  int K, kb;  // kb = K / 32
  __device__ int4 half(int m, int h, int u) const {
    return *reinterpret_cast<const int4 *>(xq + m * K + h * 16 * kb + 16 * u);
  }
  __device__ int2 run(int m, int r, int u) const {
    return *reinterpret_cast<const int2 *>(xq + m * K + r * 8 * kb + 8 * u);
  }
};

template <QuantFormat F>
struct QDot;

// Q8_0: 34-byte blocks, 2-byte aligned. Unit = block.
template <>
struct QDot<QuantFormat::kQ8_0> {
  static constexpr int kElems = 32, kBytes = 34, kUnits = 1;
  struct Raw {
    unsigned d;
    int q[8];
  };
  template <bool kShared = false>
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + u * kBytes;
    Raw r;
    r.d = ld16<kShared>(b);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = ld32_a2<kShared>(b + 2 + 4 * i);
    return r;
  }
  template <int M>
  __device__ static void dot(const Raw &r, std::int64_t u, const Staged &x, float acc[M]) {
    const float d = f16_bits(r.d);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int4 a = x.half(m, 0, static_cast<int>(u)), b = x.half(m, 1, static_cast<int>(u));
      int s = __dp4a(r.q[0], a.x, 0);
      s = __dp4a(r.q[1], a.y, s);
      s = __dp4a(r.q[2], a.z, s);
      s = __dp4a(r.q[3], a.w, s);
      s = __dp4a(r.q[4], b.x, s);
      s = __dp4a(r.q[5], b.y, s);
      s = __dp4a(r.q[6], b.z, s);
      s = __dp4a(r.q[7], b.w, s);
      acc[m] += d * x.xds[m * x.kb + static_cast<int>(u)].x * static_cast<float>(s);
    }
  }
};

// Q4_0: 18-byte blocks; low nibbles are elements 0..15, high nibbles 16..31, value q - 8.
template <>
struct QDot<QuantFormat::kQ4_0> {
  static constexpr int kElems = 32, kBytes = 18, kUnits = 1;
  struct Raw {
    unsigned d;
    int q[4];
  };
  template <bool kShared = false>
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + u * kBytes;
    Raw r;
    r.d = ld16<kShared>(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.q[i] = ld32_a2<kShared>(b + 2 + 4 * i);
    return r;
  }
  template <int M>
  __device__ static void dot(const Raw &r, std::int64_t u, const Staged &x, float acc[M]) {
    const float d = f16_bits(r.d);
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = static_cast<int>(__vsub4(r.q[i] & 0x0F0F0F0F, 0x08080808));
      hi[i] = static_cast<int>(__vsub4((r.q[i] >> 4) & 0x0F0F0F0F, 0x08080808));
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int4 a = x.half(m, 0, static_cast<int>(u)), b = x.half(m, 1, static_cast<int>(u));
      int s = __dp4a(lo[0], a.x, 0);
      s = __dp4a(lo[1], a.y, s);
      s = __dp4a(lo[2], a.z, s);
      s = __dp4a(lo[3], a.w, s);
      s = __dp4a(hi[0], b.x, s);
      s = __dp4a(hi[1], b.y, s);
      s = __dp4a(hi[2], b.z, s);
      s = __dp4a(hi[3], b.w, s);
      acc[m] += d * x.xds[m * x.kb + static_cast<int>(u)].x * static_cast<float>(s);
    }
  }
};

// Q4_K / Q5_K unit k of a super-block (g = k / 2, h = k % 2): 16 bytes of qs whose low
// nibbles are elements 64g + 16h + [0, 16) (sub-block 2g) and high nibbles 64g + 32 + 16h
// + [0, 16) (sub-block 2g + 1); Q5_K adds their fifth bits from qh[16h + [0, 16)]. The
// min term of a sub-block is added once, by its h = 0 unit.
template <int M>
__device__ __forceinline__ void k4_dot(const uint4 &head, const int lo[4], const int hi[4],
                                       std::int64_t u, const Staged &x, float acc[M]) {
  const int blk = static_cast<int>(u / 8);
  const int k = static_cast<int>(u % 8), g = k / 2, h = k % 2;
  const float d = f16_bits(head.x), dmin = f16_bits(head.x >> 16);
  int sc0, m0, sc1, m1;
  k_scale_min(head, 2 * g, sc0, m0);
  k_scale_min(head, 2 * g + 1, sc1, m1);
  const float d0 = d * static_cast<float>(sc0), d1 = d * static_cast<float>(sc1);
  const float n0 = h == 0 ? dmin * static_cast<float>(m0) : 0.0f;
  const float n1 = h == 0 ? dmin * static_cast<float>(m1) : 0.0f;
  const int xb = blk * 8 + 2 * g;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int4 a = x.half(m, 0, static_cast<int>(u)), b = x.half(m, 1, static_cast<int>(u));
    int sl = __dp4a(lo[0], a.x, 0);
    sl = __dp4a(lo[1], a.y, sl);
    sl = __dp4a(lo[2], a.z, sl);
    sl = __dp4a(lo[3], a.w, sl);
    int sh = __dp4a(hi[0], b.x, 0);
    sh = __dp4a(hi[1], b.y, sh);
    sh = __dp4a(hi[2], b.z, sh);
    sh = __dp4a(hi[3], b.w, sh);
    const float2 xl = x.xds[m * x.kb + xb], xh = x.xds[m * x.kb + xb + 1];
    acc[m] += d0 * xl.x * static_cast<float>(sl) + d1 * xh.x * static_cast<float>(sh) -
              (n0 * xl.y + n1 * xh.y);
  }
}

template <>
struct QDot<QuantFormat::kQ4_K> {
  static constexpr int kElems = 256, kBytes = 144, kUnits = 8;
  struct Raw {
    uint4 head, qs;
  };
  template <bool kShared = false>
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + (u / 8) * kBytes;
    return {ld128<kShared>(b), ld128<kShared>(b + 16 + 16 * (u % 8))};
  }
  template <int M>
  __device__ static void dot(const Raw &r, std::int64_t u, const Staged &x, float acc[M]) {
    const unsigned q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = static_cast<int>(q[i] & 0x0F0F0F0F);
      hi[i] = static_cast<int>((q[i] >> 4) & 0x0F0F0F0F);
    }
    k4_dot<M>(r.head, lo, hi, u, x, acc);
  }
};

template <>
struct QDot<QuantFormat::kQ5_K> {
  static constexpr int kElems = 256, kBytes = 176, kUnits = 8;
  struct Raw {
    uint4 head, qh, qs;
  };
  template <bool kShared = false>
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + (u / 8) * kBytes;
    const int k = static_cast<int>(u % 8);
    return {ld128<kShared>(b), ld128<kShared>(b + 16 + 16 * (k % 2)),
            ld128<kShared>(b + 48 + 16 * k)};
  }
  template <int M>
  __device__ static void dot(const Raw &r, std::int64_t u, const Staged &x, float acc[M]) {
    const int g = static_cast<int>(u % 8) / 2;
    const unsigned q[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
    const unsigned qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = static_cast<int>((q[i] & 0x0F0F0F0F) | (((qh[i] >> (2 * g)) & 0x01010101) << 4));
      hi[i] = static_cast<int>(((q[i] >> 4) & 0x0F0F0F0F) |
                               (((qh[i] >> (2 * g + 1)) & 0x01010101) << 4));
    }
    k4_dot<M>(r.head, lo, hi, u, x, acc);
  }
};

// Q6_K: 210-byte blocks (2-byte aligned). Unit k (n = k / 4, l0 = 8 (k % 4)): runs r of
// elements 128n + l0 + 32r + [0, 8), from ql[64n + l0 + {0, 32}], qh[32n + l0] and
// scales[8n + l0 / 16 + 2r]; value q - 32.
template <>
struct QDot<QuantFormat::kQ6_K> {
  static constexpr int kElems = 256, kBytes = 210, kUnits = 8;
  struct Raw {
    int qa[2], qb[2], qh[2], sc[2];
    unsigned d;
  };
  template <bool kShared = false>
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + (u / 8) * kBytes;
    const int k = static_cast<int>(u % 8), n = k / 4, l0 = 8 * (k % 4);
    Raw r;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      r.qa[i] = ld32_a2<kShared>(b + 64 * n + l0 + 4 * i);
      r.qb[i] = ld32_a2<kShared>(b + 64 * n + 32 + l0 + 4 * i);
      r.qh[i] = ld32_a2<kShared>(b + 128 + 32 * n + l0 + 4 * i);
      r.sc[i] = ld32_a2<kShared>(b + 192 + 8 * n + 4 * i);
    }
    r.d = ld16<kShared>(b + 208);
    return r;
  }
  template <int M>
  __device__ static void dot(const Raw &r, std::int64_t u, const Staged &x, float acc[M]) {
    const int blk = static_cast<int>(u / 8);
    const int k = static_cast<int>(u % 8), n = k / 4, l0 = 8 * (k % 4), is = l0 / 16;
    const float d = f16_bits(r.d);
    int q[4][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const unsigned a = r.qa[i], b = r.qb[i], h = r.qh[i];
      q[0][i] = static_cast<int>(__vsub4((a & 0x0F0F0F0F) | ((h << 4) & 0x30303030), 0x20202020));
      q[1][i] = static_cast<int>(__vsub4((b & 0x0F0F0F0F) | ((h << 2) & 0x30303030), 0x20202020));
      q[2][i] = static_cast<int>(__vsub4(((a >> 4) & 0x0F0F0F0F) | (h & 0x30303030), 0x20202020));
      q[3][i] =
          static_cast<int>(__vsub4(((b >> 4) & 0x0F0F0F0F) | ((h >> 2) & 0x30303030), 0x20202020));
    }
    float ds[4];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const unsigned w = static_cast<unsigned>(r.sc[rr / 2]);
      const int s = static_cast<std::int8_t>(byte_of(w, is + 2 * (rr % 2)));
      ds[rr] = d * static_cast<float>(s);
    }
    const int xb = blk * 8 + 4 * n;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float t = 0.0f;
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) {
        const int2 xv = x.run(m, rr, static_cast<int>(u));
        const int s = __dp4a(q[rr][1], xv.y, __dp4a(q[rr][0], xv.x, 0));
        t += ds[rr] * x.xds[m * x.kb + xb + rr].x * static_cast<float>(s);
      }
      acc[m] += t;
    }
  }
};

// Stages the M input rows as int8 blocks of 32 (all threads of the block). Values are the
// bf16 the unfused path would feed the GEMM (a norm rounded as launch_add_rmsnorm does).
template <QuantFormat F, int M>
__device__ void stage_input(const QgemvParams &p, std::int8_t *xq, float2 *xds, float (*red)[M],
                            std::int64_t x_off = 0) {
  const std::int64_t K = p.K, kv = K / 8;
  const int kb = static_cast<int>(K / 32);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool norm = p.in == GemvIn::kRmsNorm;
  const float *rrow[M];
  float inv[M];
  if (norm) {
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
#pragma unroll
    for (int m = 0; m < M; ++m) {
      for (int o = 16; o > 0; o >>= 1) ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], o);
      if (lane == 0) red[warp][m] = ss[m];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float t = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) t += red[w][m];
      inv[m] = rsqrtf(t / static_cast<float>(K) + p.eps);
    }
  }
  const std::int64_t ldx = p.ldx > 0 ? p.ldx : K;
  // Groups of 8 values; 4 consecutive lanes hold one block of 32 (kv is a multiple of 4,
  // and every lane of a warp runs every iteration for the shuffles).
  for (std::int64_t base = 0; base < kv; base += kThreads) {
    const std::int64_t j = base + threadIdx.x;
    const bool ok = j < kv;
    float wf[8];
    if (norm && ok) bf16x8_to_float(reinterpret_cast<const uint4 *>(p.norm_weight)[j], wf);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.0f;
      if (ok) {
        if (norm) {
          const float4 a = reinterpret_cast<const float4 *>(rrow[m])[2 * j];
          const float4 b = reinterpret_cast<const float4 *>(rrow[m])[2 * j + 1];
          const float r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
          for (int e = 0; e < 8; ++e)
            v[e] = __bfloat162float(__float2bfloat16(r[e] * inv[m] * wf[e]));
        } else {
          bf16x8_to_float(reinterpret_cast<const uint4 *>(p.x + x_off + m * ldx)[j], v);
        }
      }
      const Q8Lane q8 = quantize_q8_lane(v);
      if (ok) {
        *reinterpret_cast<uint2 *>(xq + m * K + staged_pos<F>(static_cast<int>(8 * j), kb)) =
            make_uint2(q8.packed[0], q8.packed[1]);
        if (lane % 4 == 0)
          xds[m * (K / 32) + j / 4] = make_float2(q8.d, q8.d * static_cast<float>(q8.isum));
      }
    }
  }
}

inline std::size_t device_smem_optin() {
  int device = 0, optin = 0;
  KEEL_CUDA_CHECK(cudaGetDevice(&device));
  KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(optin);
}

// Launches a dp4a kernel on a persistent grid: one output row a warp, capped at
// p.max_waves (0: kWaves) times the blocks of `smem` bytes that fit the device at once.
inline void launch_persistent(void (*kernel)(QgemvParams), std::size_t smem, cudaStream_t s,
                              const QgemvParams &p, int num_sms) {
  // The same value for every launch on this device, so two engines' threads never race
  // over the attribute.
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(std::min(kMaxSmem, device_smem_optin()))));
  int per_sm = 0;
  KEEL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const std::int64_t rows = p.out == GemvOut::kSwiglu ? p.N / 2 : p.N;
  const std::int64_t need = (rows + kWarps - 1) / kWarps;
  if (num_sms <= 0) {
    int device = 0;
    KEEL_CUDA_CHECK(cudaGetDevice(&device));
    KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  }
  const int waves = p.max_waves > 0 ? p.max_waves : kWaves;
  const std::int64_t fit = std::int64_t(std::max(per_sm, 1)) * std::max(num_sms, 1) * waves;
  // Expert slots share the one wave: a slot a grid row.
  const int slots = p.expert_ids ? p.slots : 1;
  const std::int64_t fit_x = std::max<std::int64_t>(1, fit / slots);
  launch_maybe_pdl(kernel, dim3(static_cast<unsigned>(std::min(need, fit_x)), slots),
                   dim3(kThreads), smem, s, p.pdl, p);
}

}  // namespace keel::cuda::qgemv_detail
