// Integer-dot GEMV over GGUF blocks (see k_qgemv.h). A warp computes whole output rows;
// lane l takes units l, l + 32, ... of the row (a unit is 32 weights: a Q8_0 / Q4_0
// block, an eighth of a K-quant super-block), kUnroll units' loads in flight before the
// first dot, the next chunk's loads issued before this one's dots. Per unit and row: the weights'
// integer codes as packed bytes, dp4a against the staged int8 input, the block scales applied to
// the integer sums.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_qgemv_common.cuh"

namespace keel::cuda {

namespace {

using namespace qgemv_detail;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;                    // units in flight per lane
constexpr std::size_t kMaxSmem = 200 * 1024;  // of the H200's 227 KB per block
// Default grid cap, in blocks per SM slot: one wave, so every block stages its input once
// and its warps loop over rows (bench/RESULTS.md: 1 beat 2 and 4 at every shape and M).
constexpr int kWaves = 1;

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
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + u * kBytes;
    Raw r;
    r.d = ld_u16(b);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = ld_i32_a2(b + 2 + 4 * i);
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
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + u * kBytes;
    Raw r;
    r.d = ld_u16(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.q[i] = ld_i32_a2(b + 2 + 4 * i);
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
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + (u / 8) * kBytes;
    return {__ldg(reinterpret_cast<const uint4 *>(b)),
            __ldg(reinterpret_cast<const uint4 *>(b + 16 + 16 * (u % 8)))};
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
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + (u / 8) * kBytes;
    const int k = static_cast<int>(u % 8);
    return {__ldg(reinterpret_cast<const uint4 *>(b)),
            __ldg(reinterpret_cast<const uint4 *>(b + 16 + 16 * (k % 2))),
            __ldg(reinterpret_cast<const uint4 *>(b + 48 + 16 * k))};
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
  __device__ static Raw load(const std::uint8_t *row, std::int64_t u) {
    const std::uint8_t *b = row + (u / 8) * kBytes;
    const int k = static_cast<int>(u % 8), n = k / 4, l0 = 8 * (k % 4);
    Raw r;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      r.qa[i] = ld_i32_a2(b + 64 * n + l0 + 4 * i);
      r.qb[i] = ld_i32_a2(b + 64 * n + 32 + l0 + 4 * i);
      r.qh[i] = ld_i32_a2(b + 128 + 32 * n + l0 + 4 * i);
      r.sc[i] = ld_i32_a2(b + 192 + 8 * n + 4 * i);
    }
    r.d = ld_u16(b + 208);
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
__device__ void stage_input(const QgemvParams &p, std::int8_t *xq, float2 *xds, float (*red)[M]) {
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
          bf16x8_to_float(reinterpret_cast<const uint4 *>(p.x + m * ldx)[j], v);
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

template <QuantFormat F, int M>
__device__ __forceinline__ void qgemv_body(const QgemvParams &p) {
  using T = QDot<F>;
  extern __shared__ uint4 smem_raw[];
  __shared__ float red[kWarps][M];
  const std::int64_t K = p.K;
  auto *xq = reinterpret_cast<std::int8_t *>(smem_raw);
  auto *xds = reinterpret_cast<float2 *>(xq + M * K);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool swiglu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = swiglu ? p.N / 2 : p.N;
  const std::int64_t ldy = p.ldy > 0 ? p.ldy : rows;
  const std::int64_t units = K / T::kElems * T::kUnits;
  const std::size_t row_bytes = static_cast<std::size_t>(K / T::kElems) * T::kBytes;
  const auto *w = static_cast<const std::uint8_t *>(p.w);
  const std::int64_t first = std::int64_t(blockIdx.x) * kWarps + warp;
  const std::int64_t stride = std::int64_t(gridDim.x) * kWarps;
  // A warp's work is a sequence of chunks (kUnroll units a lane): over its rows n =
  // first, first + stride, ..., over the gate and up row of each for SwiGLU, over the
  // row's units. Chunk q + 1's loads are issued before chunk q's dot products, so a
  // warp's loads stay in flight while it computes, across row boundaries too; chunk 0's
  // are issued before the PDL wait and the staging (weights never depend on the previous
  // kernel), so their latency overlaps both.
  const int parts = swiglu ? 2 : 1;
  const std::int64_t per_chunk = 32 * kUnroll;
  const std::int64_t chunks_per_row = (units + per_chunk - 1) / per_chunk;
  const std::int64_t my_rows = first < rows ? (rows - 1 - first) / stride + 1 : 0;
  const std::int64_t total = my_rows * parts * chunks_per_row;
  // Chunk position (row index in the warp's sequence, part, chunk in the row), advanced
  // by counting: no 64-bit division per chunk.
  struct At {
    std::int64_t row = 0, c = 0;
    int part = 0;
  };
  auto advance = [&](At &a) {
    if (++a.c < chunks_per_row) return;
    a.c = 0;
    if (++a.part < parts) return;
    a.part = 0;
    ++a.row;
  };
  auto load_chunk = [&](const At &a, typename T::Raw(&dst)[kUnroll]) {
    const std::int64_t n = first + a.row * stride + a.part * rows;
    const std::uint8_t *wr = w + static_cast<std::size_t>(n) * row_bytes;
    const std::int64_t u0 = lane + a.c * per_chunk;
#pragma unroll
    for (int i = 0; i < kUnroll; ++i)
      if (u0 + 32 * i < units) dst[i] = T::load(wr, u0 + 32 * i);
  };
  typename T::Raw cur[kUnroll], nxt[kUnroll];
  if (total > 0) load_chunk(At{}, cur);
  wait_for_previous_kernel();
  allow_next_kernel();
  stage_input<F, M>(p, xq, xds, red);
  __syncthreads();
  const Staged x{xq, xds, static_cast<int>(K), static_cast<int>(K / 32)};
  float acc[M], gate[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = gate[m] = 0.0f;
  At at, next;
  advance(next);
  for (std::int64_t q = 0; q < total; ++q) {
    if (q + 1 < total) load_chunk(next, nxt);
    const std::int64_t u0 = lane + at.c * per_chunk;
#pragma unroll
    for (int i = 0; i < kUnroll; ++i)
      if (u0 + 32 * i < units) T::template dot<M>(cur[i], u0 + 32 * i, x, acc);
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) cur[i] = nxt[i];
    const At done = at;
    at = next;
    advance(next);
    if (done.c + 1 < chunks_per_row) continue;
      // The row (or SwiGLU part) is complete: its sums over the warp.
#pragma unroll
    for (int m = 0; m < M; ++m)
      for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    if (swiglu && done.part == 0) {  // the gate row: kept for its up row
#pragma unroll
      for (int m = 0; m < M; ++m) gate[m] = acc[m], acc[m] = 0.0f;
      continue;
    }
    const std::int64_t n = first + done.row * stride;
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
}

template <QuantFormat F, int M>
__global__ void __launch_bounds__(kThreads) qgemv_kernel(const QgemvParams p) {
  qgemv_body<F, M>(p);
}
// The same with registers capped for two blocks an SM: Q6_K at M = 2 took 153 registers
// otherwise (one block an SM) and ran 1.3x slower than before the staged input went
// unit-major (bench/RESULTS.md, session 15); capped, ptxas spills nothing. The other
// instantiations measured best with the compiler's own choice or spill when capped.
template <QuantFormat F, int M>
__global__ void __launch_bounds__(kThreads, 2) qgemv_kernel_two_blocks(const QgemvParams p) {
  qgemv_body<F, M>(p);
}

// The kernel a shape launches (only the one chosen is instantiated).
template <QuantFormat F, int M>
constexpr auto qgemv_entry() {
  if constexpr (F == QuantFormat::kQ6_K && M == 2)
    return qgemv_kernel_two_blocks<F, M>;
  else
    return qgemv_kernel<F, M>;
}

std::size_t device_smem_optin() {
  int device = 0, optin = 0;
  KEEL_CUDA_CHECK(cudaGetDevice(&device));
  KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(optin);
}

template <QuantFormat F, int M>
void launch_fm(cudaStream_t s, const QgemvParams &p, int num_sms) {
  const auto kernel = qgemv_entry<F, M>();
  const std::size_t smem = qgemv_smem_bytes(M, p.K);
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
  launch_maybe_pdl(kernel, dim3(static_cast<unsigned>(std::min(need, fit))), dim3(kThreads), smem,
                   s, p.pdl, p);
}

template <QuantFormat F>
void launch_f(cudaStream_t s, const QgemvParams &p, int num_sms) {
  switch (p.M) {
    case 1:
      return launch_fm<F, 1>(s, p, num_sms);
    case 2:
      return launch_fm<F, 2>(s, p, num_sms);
    case 3:
      return launch_fm<F, 3>(s, p, num_sms);
    case 4:
      return launch_fm<F, 4>(s, p, num_sms);
    case 5:
      return launch_fm<F, 5>(s, p, num_sms);
    case 6:
      return launch_fm<F, 6>(s, p, num_sms);
    case 7:
      return launch_fm<F, 7>(s, p, num_sms);
    default:
      return launch_fm<F, 8>(s, p, num_sms);
  }
}

}  // namespace

std::size_t qgemv_smem_bytes(int M, std::int64_t K) {
  return static_cast<std::size_t>(M) * static_cast<std::size_t>(K) +
         static_cast<std::size_t>(M) * static_cast<std::size_t>(K / 32) * sizeof(float2);
}

std::size_t qgemv_device_smem() { return device_smem_optin(); }

bool qgemv_mma_supported(QuantFormat f) { return f != QuantFormat::kMXFP4; }

bool qgemv_supported(QuantFormat f, int M, std::int64_t K, std::size_t smem_per_block) {
  return f != QuantFormat::kMXFP4 && M >= 1 && M <= kQgemvMaxM && K > 0 &&
         K % quant_block_elems(f) == 0 &&
         qgemv_smem_bytes(M, K) <= std::min(kMaxSmem, smem_per_block);
}

void launch_qgemv(StreamRef s_ref, const QgemvParams &p, int num_sms) {
  const cudaStream_t s = s_ref.get("launch_qgemv");
  if (p.N <= 0) return;
  const bool swiglu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = swiglu ? p.N / 2 : p.N;
  if (!qgemv_supported(p.format, p.M, p.K, device_smem_optin()) || (swiglu && p.N % 2 != 0) ||
      (p.ldy > 0 && p.ldy < rows) || !p.w || !p.y ||
      reinterpret_cast<std::uintptr_t>(p.w) % 16 != 0 ||
      (p.in == GemvIn::kBf16 && (!p.x || reinterpret_cast<std::uintptr_t>(p.x) % 16 != 0 ||
                                 (p.ldx > 0 && (p.ldx < p.K || p.ldx % 8 != 0)))) ||
      (p.in == GemvIn::kRmsNorm && (!p.residual || !p.norm_weight)))
    throw Error(ErrorCode::kInvalidArgument, "qgemv: unsupported shape M=" + std::to_string(p.M) +
                                                 " N=" + std::to_string(p.N) +
                                                 " K=" + std::to_string(p.K));
  if (p.mma && qgemv_mma_supported(p.format)) {
    qgemv_detail::launch_qgemv_mma(s, p, num_sms);
    KEEL_CUDA_CHECK_LAUNCH("qgemv_mma");
    return;
  }
  switch (p.format) {
    case QuantFormat::kQ8_0:
      launch_f<QuantFormat::kQ8_0>(s, p, num_sms);
      break;
    case QuantFormat::kQ4_0:
      launch_f<QuantFormat::kQ4_0>(s, p, num_sms);
      break;
    case QuantFormat::kQ4_K:
      launch_f<QuantFormat::kQ4_K>(s, p, num_sms);
      break;
    case QuantFormat::kQ5_K:
      launch_f<QuantFormat::kQ5_K>(s, p, num_sms);
      break;
    case QuantFormat::kQ6_K:
      launch_f<QuantFormat::kQ6_K>(s, p, num_sms);
      break;
    case QuantFormat::kMXFP4:  // rejected above
      break;
  }
  KEEL_CUDA_CHECK_LAUNCH("qgemv");
}

}  // namespace keel::cuda
