// The DSA indexer's scores on the tensor cores (k_dsa_scores_mma.h).
//
// dsa_scores_mma_kernel<Di>: grid (ctas_per_row, rows), 4 warps; a row's keys [0, p] split
// evenly over its blocks in whole warp tiles of 32 keys, a block's tiles dealt round-robin to
// its warps. Per tile: S = Q K^T with mma.sync m16n8k16 (bf16 in, f32 accumulators): M = the
// index heads (m16 tiles, Hi / 16), N = 4 n8 tiles of keys, K = Di. Then relu, the weights
// w[h] Hi^-1/2 Di^-1/2 and the sum over heads (in-thread over the m-tiles, then a
// reduce-scatter over the 8 lanes of a key column) to one score a key, one store a lane.
//
// Precision: q is fp32 (the CPU's and the tests' reference); bf16 q would move the scores by
// ~2^-9 relative and flip the top-k at its boundary. So q = hi + lo, hi = bf16(q), lo =
// bf16(q - hi), and both are multiplied: hi k + lo k carries q to ~2^-16 relative (the keys
// are bf16 already, their products exact in the f32 accumulators), i.e. about the fp32 kernel.
//
// Keys go from the paged cache straight into B fragments, with no shared-memory stage: the
// dot product does not care in which order it takes the Di values, so the k index of the mma
// is permuted to let each lane load contiguous values. Lane (g, c) = (lane / 4, lane % 4)
// holds values [c Di/4, (c + 1) Di/4) of key g of each n8 tile (Di / 32 16-byte loads a key),
// and k-step j's k index 2c + e (b0) is value c Di/4 + 4j + e, 2c + 8 + e (b1) value c Di/4 +
// 4j + 2 + e: b0, b1 = the lane's words 2j, 2j + 1. The A fragments (q) use the same map,
// laid out per (m-tile, step, hi/lo) as 32 lanes x 16 bytes so that one LDS.128 a lane loads
// each (conflict-free). Each warp loads its next tile into registers while it multiplies the
// current one; the block's first tiles are in flight while it stages q.
#include <cuda_bf16.h>

#include <cstdint>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_dsa_scores_keys.cuh"
#include "exec/cuda/k_dsa_scores_mma.h"
#include "exec/cuda/k_mla_rope.cuh"
#include "exec/cuda/k_mma.cuh"

namespace keel::cuda {

namespace {

using mla_detail::rope_index;
using mla_detail::rope_pair;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kNT = 4;              // n8 key tiles a warp tile
constexpr int kTileKeys = 8 * kNT;  // keys a warp tile
constexpr int kMaxHi = 128;
constexpr int kMmaDi = 128;  // the one key width instantiated (GLM-5, DeepSeek-V3.2)

__device__ __forceinline__ std::uint32_t bf16x2_bits(__nv_bfloat162 v) {
  return *reinterpret_cast<std::uint32_t *>(&v);
}

template <int kDi>
__global__ void __launch_bounds__(kThreads, kDsaScoresMmaBlocksPerSm)
    dsa_scores_mma_kernel(DsaScoreParams p) {
  static_assert(kDi % 32 == 0, "a lane's quarter of a key is whole 16-byte loads");
  constexpr int kSteps = kDi / 16;  // k16 steps of the mma
  constexpr int kSpan = kDi / 4;    // values of a key a lane holds
  constexpr int kVecs = kSpan / 8;  // its 16-byte loads
  extern __shared__ __align__(16) unsigned char smem[];
  int t, k_begin, k_end;
  DsaToken tok;
  if (!dsa_detail::scores_block_keys(p, kTileKeys, t, tok, k_begin, k_end)) return;

  const int Hi = p.Hi, rope = p.rope;
  // [Hi / 16][kSteps][hi, lo][32 lanes][4 words]: A fragments
  std::uint32_t *frag = reinterpret_cast<std::uint32_t *>(smem);
  float *qr = reinterpret_cast<float *>(frag + Hi * kDi);  // [Hi][rope] roped values of q
  float *ws = qr + Hi * rope;                              // [Hi] w Hi^-1/2 Di^-1/2
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int bs = p.layout.block_size;

  // Keys [k0, k0 + 32) into B fragments; keys at or past k_end zero (not written out).
  auto load = [&](uint4(&buf)[kNT][kVecs], int k0) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int key = k0 + nt * 8 + g;
      if (key < k_end) {
        const std::int32_t block = p.block_table[tok.block_offset + key / bs];
        const uint4 *src = reinterpret_cast<const uint4 *>(
            p.cache + p.layout.offset(block, p.layer, 0, key % bs) + p.key_at + c * kSpan);
#pragma unroll
        for (int v = 0; v < kVecs; ++v) buf[nt][v] = __ldg(src + v);
      } else {
#pragma unroll
        for (int v = 0; v < kVecs; ++v) buf[nt][v] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  constexpr int kStride = kWarps * kTileKeys;
  int k0 = k_begin + warp * kTileKeys;
  uint4 cur[kNT][kVecs], nxt[kNT][kVecs];
  if (k0 < k_end) load(cur, k0);

  // Stage q: the rope values rotated (as the fp32 kernel), then every value split into hi and
  // lo in its fragment slot, two values (one 32-bit word) at a time.
  const float *q = p.q + std::int64_t(t) * Hi * kDi;
  const float pos = static_cast<float>(tok.pos);
  for (int i = threadIdx.x; i < Hi * (rope / 2); i += kThreads) {
    const int h = i / (rope / 2), j = i % (rope / 2);
    int a, b;
    rope_index(j, rope, p.rp.interleaved, a, b);
    float y1, y2;
    rope_pair(j, pos, p.rp, q[h * kDi + a], q[h * kDi + b], y1, y2);
    qr[h * rope + a] = y1;
    qr[h * rope + b] = y2;
  }
  // relu(x) s = relu(x s) for s > 0: Di^-1/2 joins the weights.
  const float wscale = (1.0f / sqrtf(static_cast<float>(Hi))) / sqrtf(static_cast<float>(kDi));
  for (int h = threadIdx.x; h < Hi; h += kThreads)
    ws[h] = p.w[std::int64_t(t) * p.w_stride + h] * wscale;
  __syncthreads();
  for (int i = threadIdx.x; i < Hi * (kDi / 2); i += kThreads) {
    const int h = i / (kDi / 2), d = 2 * (i % (kDi / 2));  // rope is even: d, d + 1 alike
    const float x0 = d < rope ? qr[h * rope + d] : q[h * kDi + d];
    const float x1 = d < rope ? qr[h * rope + d + 1] : q[h * kDi + d + 1];
    const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(x0 - __low2float(hi), x1 - __high2float(hi));
    // Head h is row h % 16 of m-tile h / 16 (a0 / a2 rows g, a1 / a3 rows g + 8); value d is
    // lane c = d / kSpan's, step (d % kSpan) / 4, in a0 / a1 for (d % 4) < 2 else a2 / a3.
    const int row = h % 16, span = d % kSpan;
    const int reg = row / 8 + (span % 4);
    const int word =
        (((h / 16) * kSteps + span / 4) * 2 * 32 + (row % 8) * 4 + d / kSpan) * 4 + reg;
    frag[word] = bf16x2_bits(hi);
    frag[word + 32 * 4] = bf16x2_bits(lo);
  }
  __syncthreads();

  const uint4 *fr = reinterpret_cast<const uint4 *>(frag);
  const int mts = Hi / 16;
  float *row_scores = p.scores + std::int64_t(blockIdx.y) * p.stride;
  for (; k0 < k_end; k0 += kStride) {
    if (k0 + kStride < k_end) load(nxt, k0 + kStride);
    float part[kNT * 2] = {};  // [nt][column e]: this lane's rows' weighted relu sums
    for (int mt = 0; mt < mts; ++mt) {
      float acc[kNT][4] = {};
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        const uint4 h4 = fr[((mt * kSteps + j) * 2) * 32 + lane];
        const uint4 l4 = fr[((mt * kSteps + j) * 2 + 1) * 32 + lane];
        const std::uint32_t ah[4] = {h4.x, h4.y, h4.z, h4.w}, al[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const uint4 kv = cur[nt][j / 2];  // words 2j, 2j + 1 of the lane's span
          const std::uint32_t b0 = j % 2 ? kv.z : kv.x, b1 = j % 2 ? kv.w : kv.y;
          mma_bf16(acc[nt], al, b0, b1);
          mma_bf16(acc[nt], ah, b0, b1);
        }
      }
      const float w0 = ws[mt * 16 + g], w1 = ws[mt * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          part[nt * 2 + e] += w0 * fmaxf(acc[nt][e], 0.0f) + w1 * fmaxf(acc[nt][2 + e], 0.0f);
    }
    // Sum over the 8 lanes of each key column (lane bits 2..4 = g), halving the values a lane
    // keeps at each step: lane g ends with value g = (nt, e) = (g / 2, g % 2) of the tile.
#pragma unroll
    for (int m = 16, half = 4; m >= 4; m /= 2, half /= 2) {
      const bool up = (lane & m) != 0;
#pragma unroll
      for (int i = 0; i < half; ++i) {
        const float send = up ? part[i] : part[i + half];
        const float keep = up ? part[i + half] : part[i];
        part[i] = keep + __shfl_xor_sync(0xffffffffu, send, m);
      }
    }
    const int key = k0 + (g / 2) * 8 + 2 * c + g % 2;
    if (key < k_end) row_scores[key] = part[0];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int v = 0; v < kVecs; ++v) cur[nt][v] = nxt[nt][v];
  }
}

}  // namespace

bool dsa_scores_mma_supported(int Hi, int Di, int rope) {
  return Di == kMmaDi && Hi > 0 && Hi % 16 == 0 && Hi <= kMaxHi && rope >= 0 && rope % 2 == 0 &&
         rope <= Di;
}

std::size_t dsa_scores_mma_smem(int Hi, int Di, int rope) {
  return static_cast<std::size_t>(Hi) *
         (Di * 2 * sizeof(bf16) + rope * sizeof(float) + sizeof(float));
}

void launch_dsa_scores_mma(cudaStream_t s, const DsaScoreParams &p) {
  const std::size_t smem = dsa_scores_mma_smem(p.Hi, p.Di, p.rope);
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(dsa_scores_mma_kernel<kMmaDi>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  dsa_scores_mma_kernel<kMmaDi><<<dim3(p.ctas_per_row, p.rows), kThreads, smem, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("dsa_scores_mma");
}

}  // namespace keel::cuda
