// Tensor-core integer GEMV over GGUF blocks (QgemvParams::mma, k_qgemv.h). A block computes
// a group of kTiles x 16 weight rows (for kSwiglu 8 gate rows and their 8 up rows per tile)
// for all M <= 8 input rows; its 8 warps take contiguous slices of the row's units
// (super-blocks; Q8_0 / Q4_0 blocks) and sum their fragments through shared memory, as the
// bf16 fused_gemv_mma_kernel (k_decode_fused.cu). Per 32-value sub-block of one weight
// scale (16 for Q6_K): the lane's weight codes are unpacked with and/shift into s8 bytes
// (the A operand, rows g and g + 8 of the tile), the staged int8 input is the B operand
// (column n = input row n, zero from M on), mma.sync gives the int32 dots, and each is
// scaled by the weight scale times the input block's scale; the K-quant min term (and
// Q4_0's offset of 8) is the weight min times the staged block sum, as the dp4a kernel
// does. A and B share one permutation of the 32 values (the staging puts each value where
// the lane holding its weight code reads it), so the dots are unchanged.
#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_mma.cuh"
#include "exec/cuda/k_pdl.cuh"
#include "exec/cuda/k_qgemv.h"
#include "exec/cuda/k_qgemv_common.cuh"

namespace keel::cuda::qgemv_detail {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr std::size_t kMaxSmem = 200 * 1024;  // as k_qgemv.cu
// Grid: the blocks that fit at once, looping over groups (each block stages its input
// once), as the bf16 tensor-core GEMV.
constexpr int kWaves = 1;

// The staged input: xq [K / 32][M][32] int8 -- one 32-byte record per (sub-block j, input
// row m), so the 32 lanes of a B fragment load read 256 consecutive bytes -- then xds
// [K / 32][M] (scale d, d x the sum of the 32 codes). Within a record value v sits at
//   identity (Q4_K, Q5_K): v; lane t's B words are values 8t..8t+7, matching the qs bytes
//     8t..8t+7 of a 32-byte run that it holds for its two weight rows;
//   permuted (Q6_K, Q8_0, Q4_0): 8 ((v % 16) / 4) + 4 (v / 16) + v % 4; lane t's words are
//     values 4t..4t+3 and 16 + 4t..16 + 4t + 3, the weight bytes 4t.. of each 16-value half.
struct StagedMma {
  const std::int8_t *xq;
  const float2 *xds;
  int M;
  // B fragment words of input row g (the MMA's column g) for sub-block j; zero past M.
  __device__ uint2 b(int j, int g, int t) const {
    return g < M ? *reinterpret_cast<const uint2 *>(xq + (j * M + g) * 32 + 8 * t)
                 : make_uint2(0, 0);
  }
  __device__ float2 ds(int j, int m) const {
    return m < M ? xds[j * M + m] : make_float2(0.0f, 0.0f);
  }
};

// Rows g and g + 8 of a tile (rows[0], rows[1]); acc[] is the lane's fragment: (row g,
// columns 2t, 2t + 1), (row g + 8, same columns).
template <QuantFormat F>
struct QMma;

// Q4_K / Q5_K: 144 / 176-byte super-blocks (16-byte aligned). Per run i (0..3) of 32 qs
// bytes the lane holds bytes 8t..8t+7 of both rows: low nibbles are values 8t..8t+7 of
// sub-block 2i, high nibbles those of sub-block 2i + 1 (Q5_K: fifth bits 2i, 2i + 1 of
// qh[8t..8t+7]). One k32 MMA per sub-block.
template <bool kQ5, int KT>
struct QMmaK4 {
  static constexpr int kElems = 256, kBytes = kQ5 ? 176 : 144, kUnroll = 1, kTiles = KT;
  static constexpr bool kPerm = false;
  static constexpr int kQs = kQ5 ? 48 : 16;
  struct Raw {
    uint4 head[2];
    uint2 qs[2][4];
    uint2 qh[2];  // Q5_K only
  };
  __device__ static void load(Raw &r, const std::uint8_t *const (&rows)[2], int u, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t *b = rows[h] + static_cast<std::size_t>(u) * kBytes;
      r.head[h] = __ldg(reinterpret_cast<const uint4 *>(b));
      if constexpr (kQ5) r.qh[h] = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 8 * t));
#pragma unroll
      for (int i = 0; i < 4; ++i)
        r.qs[h][i] = __ldg(reinterpret_cast<const uint2 *>(b + kQs + 32 * i + 8 * t));
    }
  }
  __device__ static void dot(const Raw &r, int u, const StagedMma &x, int g, int t,
                             float (&acc)[4]) {
    float d[2], dmin[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      d[h] = f16_bits(r.head[h].x);
      dmin[h] = f16_bits(r.head[h].x >> 16);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // A registers: row g bytes 8t..8t+3, row g + 8 the same, then bytes 8t+4..8t+7.
      const unsigned w[4] = {r.qs[0][i].x, r.qs[1][i].x, r.qs[0][i].y, r.qs[1][i].y};
      std::uint32_t lo[4], hi[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        lo[e] = w[e] & 0x0F0F0F0Fu;
        hi[e] = (w[e] >> 4) & 0x0F0F0F0Fu;
        if constexpr (kQ5) {
          const unsigned qh = e == 0   ? r.qh[0].x
                              : e == 1 ? r.qh[1].x
                              : e == 2 ? r.qh[0].y
                                       : r.qh[1].y;
          lo[e] |= ((qh >> (2 * i)) & 0x01010101u) << 4;
          hi[e] |= ((qh >> (2 * i + 1)) & 0x01010101u) << 4;
        }
      }
      const int j = u * 8 + 2 * i;
      const uint2 bl = x.b(j, g, t), bh = x.b(j + 1, g, t);
      int cl[4], ch[4];
      mma_s8_k32(cl, lo, bl.x, bl.y);
      mma_s8_k32(ch, hi, bh.x, bh.y);
      const float2 xl[2] = {x.ds(j, 2 * t), x.ds(j, 2 * t + 1)};
      const float2 xh[2] = {x.ds(j + 1, 2 * t), x.ds(j + 1, 2 * t + 1)};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int sc0, mn0, sc1, mn1;
        k_scale_min(r.head[h], 2 * i, sc0, mn0);
        k_scale_min(r.head[h], 2 * i + 1, sc1, mn1);
        const float d0 = d[h] * static_cast<float>(sc0), m0 = dmin[h] * static_cast<float>(mn0);
        const float d1 = d[h] * static_cast<float>(sc1), m1 = dmin[h] * static_cast<float>(mn1);
#pragma unroll
        for (int e = 0; e < 2; ++e)
          acc[2 * h + e] += d0 * xl[e].x * static_cast<float>(cl[2 * h + e]) +
                            d1 * xh[e].x * static_cast<float>(ch[2 * h + e]) -
                            (m0 * xl[e].y + m1 * xh[e].y);
      }
    }
  }
};

// One tile: with two, ptxas took 176-230 registers (one block an SM) or spilled under the
// kernel's two-block bound.
template <>
struct QMma<QuantFormat::kQ4_K> : QMmaK4<false, 1> {};
template <>
struct QMma<QuantFormat::kQ5_K> : QMmaK4<true, 1> {};

// Q6_K: the lane's bytes and codes as Q6kLane (k_qgemv_common.cuh). One k16 MMA per run (a
// scale per 16 values); the two runs of a sub-block share its input scale, so their dots are
// combined in integers first.
template <>
struct QMma<QuantFormat::kQ6_K> {
  static constexpr int kElems = 256, kBytes = 210, kUnroll = 1, kTiles = 1;  // as Q4_K
  static constexpr bool kPerm = true;
  using Raw = Q6kLane;
  __device__ static void load(Raw &r, const std::uint8_t *const (&rows)[2], int u, int t) {
    r.load(rows, u, t);
  }
  __device__ static void dot(const Raw &r, int u, const StagedMma &x, int g, int t,
                             float (&acc)[4]) {
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) {
        const int j = u * 8 + 4 * n + rr;
        const uint2 bx = x.b(j, g, t);
        int c[2][4];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          mma_s8_k16(c[hh], r.codes(0, n, rr, hh), r.codes(1, n, rr, hh), hh == 0 ? bx.x : bx.y);
        }
        const float2 xv[2] = {x.ds(j, 2 * t), x.ds(j, 2 * t + 1)};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int s0 = r.scale(h, n, rr, 0), s1 = r.scale(h, n, rr, 1);
          const float dh = f16_bits(r.d[h]);
#pragma unroll
          for (int e = 0; e < 2; ++e)
            acc[2 * h + e] +=
                dh * xv[e].x * static_cast<float>(c[0][2 * h + e] * s0 + c[1][2 * h + e] * s1);
        }
      }
  }
};

// Q8_0: 34-byte blocks (2-byte aligned), a unit each; the lane holds bytes 4t..4t+3 and
// 16 + 4t.. of the codes of both rows.
template <>
struct QMma<QuantFormat::kQ8_0> {
  // Small units: 4 in flight a tile, so a warp's loads are not one block's 68 bytes.
  static constexpr int kElems = 32, kBytes = 34, kUnroll = 4, kTiles = 2;
  static constexpr bool kPerm = true;
  struct Raw {
    unsigned q[2][2], d[2];
  };
  __device__ static void load(Raw &r, const std::uint8_t *const (&rows)[2], int u, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t *b = rows[h] + static_cast<std::size_t>(u) * kBytes;
      r.d[h] = ld_u16(b);
      r.q[h][0] = static_cast<unsigned>(ld_i32_a2(b + 2 + 4 * t));
      r.q[h][1] = static_cast<unsigned>(ld_i32_a2(b + 18 + 4 * t));
    }
  }
  __device__ static void dot(const Raw &r, int u, const StagedMma &x, int g, int t,
                             float (&acc)[4]) {
    const std::uint32_t a[4] = {r.q[0][0], r.q[1][0], r.q[0][1], r.q[1][1]};
    const uint2 bx = x.b(u, g, t);
    int c[4];
    mma_s8_k32(c, a, bx.x, bx.y);
    const float2 xv[2] = {x.ds(u, 2 * t), x.ds(u, 2 * t + 1)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float dh = f16_bits(r.d[h]);
#pragma unroll
      for (int e = 0; e < 2; ++e) acc[2 * h + e] += dh * xv[e].x * static_cast<float>(c[2 * h + e]);
    }
  }
};

// Q4_0: 18-byte blocks (2-byte aligned); the lane holds qs bytes 4t..4t+3 of both rows:
// low nibbles are values 4t..4t+3, high nibbles 16 + 4t... Codes 0..15 go in as they are;
// the offset of 8 is 8 d times the staged block sum.
template <>
struct QMma<QuantFormat::kQ4_0> {
  static constexpr int kElems = 32, kBytes = 18, kUnroll = 4, kTiles = 2;
  static constexpr bool kPerm = true;
  struct Raw {
    unsigned q[2], d[2];
  };
  __device__ static void load(Raw &r, const std::uint8_t *const (&rows)[2], int u, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t *b = rows[h] + static_cast<std::size_t>(u) * kBytes;
      r.d[h] = ld_u16(b);
      r.q[h] = static_cast<unsigned>(ld_i32_a2(b + 2 + 4 * t));
    }
  }
  __device__ static void dot(const Raw &r, int u, const StagedMma &x, int g, int t,
                             float (&acc)[4]) {
    const std::uint32_t a[4] = {r.q[0] & 0x0F0F0F0Fu, r.q[1] & 0x0F0F0F0Fu,
                                (r.q[0] >> 4) & 0x0F0F0F0Fu, (r.q[1] >> 4) & 0x0F0F0F0Fu};
    const uint2 bx = x.b(u, g, t);
    int c[4];
    mma_s8_k32(c, a, bx.x, bx.y);
    const float2 xv[2] = {x.ds(u, 2 * t), x.ds(u, 2 * t + 1)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float dh = f16_bits(r.d[h]);
#pragma unroll
      for (int e = 0; e < 2; ++e)
        acc[2 * h + e] += dh * (xv[e].x * static_cast<float>(c[2 * h + e]) - 8.0f * xv[e].y);
    }
  }
};

// Stages the M input rows as int8 blocks of 32 in the record layout above (all threads of
// the block); the values, their rounding and the block sums are the dp4a kernel's.
template <bool kPerm>
__device__ void stage_input(const QgemvParams &p, std::int8_t *xq, float2 *xds,
                            float (*red)[kQgemvMaxM]) {
  constexpr int R = kQgemvMaxM;
  const int M = p.M;
  const std::int64_t K = p.K, kv = K / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool norm = p.in == GemvIn::kRmsNorm;
  // Residual row of input m (32-bit: fewer registers live beside the first weight loads).
  auto rrow = [&](int m) { return p.residual + std::int64_t(p.rows ? p.rows[m] : m) * K; };
  float inv[R];
  if (norm) {
    float ss[R];
#pragma unroll
    for (int m = 0; m < R; ++m) ss[m] = 0.0f;
    for (std::int64_t j = threadIdx.x; j < K / 4; j += kThreads) {
#pragma unroll
      for (int m = 0; m < R; ++m)
        if (m < M) {
          const float4 v = reinterpret_cast<const float4 *>(rrow(m))[j];
          ss[m] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    }
#pragma unroll
    for (int m = 0; m < R; ++m)
      if (m < M) {
        for (int o = 16; o > 0; o >>= 1) ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], o);
        if (lane == 0) red[warp][m] = ss[m];
      }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < R; ++m) {
      float t = 0.0f;
      if (m < M)
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
    for (int m = 0; m < R; ++m) {
      if (m >= M) break;  // uniform over the block
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.0f;
      if (ok) {
        if (norm) {
          const float4 *r4 = reinterpret_cast<const float4 *>(rrow(m));
          const float4 a = r4[2 * j], b = r4[2 * j + 1];
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
        const int jb = static_cast<int>(j / 4), s = static_cast<int>(j % 4);
        store_q8_record_part(xq + (jb * M + m) * 32, s, q8, kPerm);
        if (lane % 4 == 0) xds[jb * M + m] = make_float2(q8.d, q8.d * static_cast<float>(q8.isum));
      }
    }
  }
}

// Two blocks an SM (128 registers): 16 warps' loads in flight where shared memory allows.
template <QuantFormat F>
__global__ void __launch_bounds__(kThreads, 2) qgemv_mma_kernel(const QgemvParams p) {
  using T = QMma<F>;
  constexpr int U = T::kUnroll;
  extern __shared__ uint4 smem_raw[];
  __shared__ float red[kWarps][kQgemvMaxM];
  constexpr int kTiles = T::kTiles;  // 16-row tiles a warp computes, sharing input fragments
  __shared__ float4 part[kWarps][kTiles][32];  // each warp's fragments of the group
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int M = p.M;
  const bool glu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = glu ? p.N / 2 : p.N;
  const std::int64_t ldy = p.ldy > 0 ? p.ldy : rows;
  const int tile_rows = glu ? 8 : 16, group_rows = tile_rows * kTiles;
  const std::int64_t groups = (rows + group_rows - 1) / group_rows;
  const int units = static_cast<int>(p.K / T::kElems);
  const int u_begin = warp * units / kWarps, u_end = (warp + 1) * units / kWarps;
  const std::size_t row_bytes = static_cast<std::size_t>(units) * T::kBytes;
  const auto *w = static_cast<const std::uint8_t *>(p.w);
  // This lane's weight rows of tile i: row g and the row 8 below (for kSwiglu gate row g
  // and its up row). A row past the end reads row 0 (its outputs are never stored).
  const std::uint8_t *wr[kTiles][2];
  auto rows_of = [&](std::int64_t grp) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      std::int64_t a = grp * group_rows + i * tile_rows + g, b = glu ? a + rows : a + 8;
      if (a >= rows) a = 0, b = glu ? rows : 0;
      if (!glu && b >= rows) b = 0;
      wr[i][0] = w + static_cast<std::size_t>(a) * row_bytes;
      wr[i][1] = w + static_cast<std::size_t>(b) * row_bytes;
    }
  };
  typename T::Raw raw[kTiles][U];
  auto load = [&](int u0) {
#pragma unroll
    for (int k = 0; k < U; ++k)
      if (u0 + k < u_end)
#pragma unroll
        for (int i = 0; i < kTiles; ++i) T::load(raw[i][k], wr[i], u0 + k, t);
  };
  // The first weight loads go out before the PDL wait and the staging (weights never
  // depend on the previous kernel).
  bool loaded = false;
  if (blockIdx.x < groups && u_begin < u_end) {
    rows_of(blockIdx.x);
    load(u_begin);
    loaded = true;
  }
  wait_for_previous_kernel();
  allow_next_kernel();
  auto *xq = reinterpret_cast<std::int8_t *>(smem_raw);
  auto *xds = reinterpret_cast<float2 *>(xq + static_cast<std::size_t>(M) * p.K);
  stage_input<T::kPerm>(p, xq, xds, red);
  __syncthreads();
  const StagedMma x{xq, xds, M};
  for (std::int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    float acc[kTiles][4] = {};
    for (int u0 = u_begin; u0 < u_end; u0 += U) {
      if (!loaded) load(u0);
      loaded = false;
#pragma unroll
      for (int k = 0; k < U; ++k)
        if (u0 + k < u_end)
#pragma unroll
          for (int i = 0; i < kTiles; ++i) T::dot(raw[i][k], u0 + k, x, g, t, acc[i]);
    }
    // The next group's first loads go out before this group's reduction and stores.
    if (grp + gridDim.x < groups && u_begin < u_end) {
      rows_of(grp + gridDim.x);
      load(u_begin);
      loaded = true;
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
      part[warp][i][lane] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    __syncthreads();
    // Fragment of lane src: (row src / 4, columns 2 (src % 4) + {0, 1}), then row + 8 (for
    // kSwiglu the up row of that gate row). Warps summed in a fixed order.
    const int per_lane = glu ? 2 : 4;
    for (int o = threadIdx.x; o < kTiles * 32 * per_lane; o += kThreads) {
      const int i = o / (32 * per_lane), src = o / per_lane % 32, e = o % per_lane;
      const int m = 2 * (src % 4) + (e & 1);
      const std::int64_t n = grp * group_rows + i * tile_rows + src / 4 + (glu ? 0 : (e >> 1) * 8);
      float a = 0.0f, b = 0.0f;
#pragma unroll
      for (int wp = 0; wp < kWarps; ++wp) {
        const float *f = reinterpret_cast<const float *>(&part[wp][i][src]);
        a += f[e];
        if (glu) b += f[e + 2];
      }
      if (m < M && n < rows) store_output(p, std::int64_t(m) * ldy + n, a, b);
    }
    __syncthreads();  // part is rewritten by the next group
  }
}

template <QuantFormat F>
void launch_f(cudaStream_t s, const QgemvParams &p, int num_sms) {
  const auto kernel = qgemv_mma_kernel<F>;
  const std::size_t smem = qgemv_smem_bytes(p.M, p.K);
  // The same value for every launch on this device, so two engines' threads never race
  // over the attribute.
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(std::min(kMaxSmem, qgemv_device_smem()))));
  int per_sm = 0;
  KEEL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const bool glu = p.out == GemvOut::kSwiglu;
  const std::int64_t rows = glu ? p.N / 2 : p.N;
  const std::int64_t group_rows = (glu ? 8 : 16) * QMma<F>::kTiles;
  const std::int64_t need = (rows + group_rows - 1) / group_rows;
  if (num_sms <= 0) {
    int device = 0;
    KEEL_CUDA_CHECK(cudaGetDevice(&device));
    KEEL_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  }
  const int waves = p.max_waves > 0 ? p.max_waves : kWaves;
  const std::int64_t fit = std::int64_t(std::max(per_sm, 1)) * std::max(num_sms, 1) * waves;
  // A plain launch even under PDL (k_qgemv.h, QgemvParams::mma).
  launch_maybe_pdl(kernel, dim3(static_cast<unsigned>(std::min(need, fit))), dim3(kThreads), smem,
                   s, false, p);
}

}  // namespace

void launch_qgemv_mma(cudaStream_t s, const QgemvParams &p, int num_sms) {
  dispatch_format(p.format, [&](auto f) { launch_f<decltype(f)::value>(s, p, num_sms); });
}

}  // namespace keel::cuda::qgemv_detail
