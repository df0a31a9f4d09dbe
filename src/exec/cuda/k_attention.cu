// Paged attention for mixed ragged batches: prefill chunks and decode tokens in one
// launch, causal over each sequence's paged keys (within AttnParams::window when set),
// with optional split-K over the keys (decode on long contexts) and a combine pass.
//
// Block = (tile, kv head, split), 4 warps. Its rows are the tile's queries x the q heads
// of one kv group (row r = query r / G, head r % G), at most kAttnMaxRows. Keys stream
// through shared memory 16 at a time (f32); each warp owns rows w, w+4, ... and keeps
// their running max, sum and output accumulator in registers (online softmax).
// This is the correct, general baseline (CUDA cores); tensor-core tiles come later.
#include <cfloat>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_attention_sink.cuh"
#include "exec/cuda/kernels.h"

namespace keel::cuda {

namespace {
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 16;                            // keys per shared-memory tile
constexpr int kRowsPerWarp = kAttnMaxRows / kWarps;  // 8
constexpr int kDimsPerLane = kAttnMaxHeadDim / 32;   // 8

// Shared memory: q [R][hd] | k [kKeys][hd + 2] | v [kKeys][hd]. The +2 pad puts the 32
// (key, half) lanes of the score loop on 32 different banks.
__host__ __device__ inline int k_stride(int hd) { return hd + 2; }
inline std::size_t smem_bytes(int hd) {
  return sizeof(float) * (std::size_t(kAttnMaxRows) * hd + std::size_t(kKeys) * k_stride(hd) +
                          std::size_t(kKeys) * hd);
}

__global__ void __launch_bounds__(kThreads) paged_attention_kernel(AttnParams p) {
  extern __shared__ float smem[];
  const int hd = p.layout.head_dim;
  const int nkv = p.layout.num_kv_heads;
  const int G = p.num_q_heads / nkv;
  const AttnTile tile = p.tiles[blockIdx.x];
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int rows = tile.num_q * G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *q_s = smem;
  float *k_s = q_s + kAttnMaxRows * hd;
  float *v_s = k_s + kKeys * k_stride(hd);

  // Keys this split covers: [k_begin, k_end) of [k_lo, kv_len), in multiples of kKeys.
  // With a sliding window the tile's first query sees keys from pos0 - window + 1 on,
  // so no split spends time on keys every row masks; a split left without keys stores
  // m = -inf and l = 0, which the combine pass skips.
  const int kv_len = tile.pos0 + tile.num_q;
  const int k_lo = p.window > 0 ? max(0, tile.pos0 - p.window + 1) : 0;
  const int n_keys = kv_len - k_lo;
  const int chunk = ((n_keys + p.num_splits - 1) / p.num_splits + kKeys - 1) / kKeys * kKeys;
  const int k_begin = k_lo + split * chunk;
  const int k_end = min(kv_len, k_begin + chunk);

  for (int idx = threadIdx.x; idx < rows * hd; idx += kThreads) {
    const int r = idx / hd, d = idx % hd;
    const int token = tile.q_start + r / G, head = kvh * G + r % G;
    q_s[idx] =
        __bfloat162float(p.qkv[std::int64_t(token) * p.row_stride + std::int64_t(head) * hd + d]) *
        p.scale;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) acc[i][j] = 0.0f;
  }

  const int key = lane % kKeys, half = lane / kKeys;
  const int vec_per_key = hd / 8;  // 16-byte vectors of 8 bf16
  for (int kbase = k_begin; kbase < k_end; kbase += kKeys) {
    __syncthreads();  // previous tile fully consumed (and q_s written, first time round)
    for (int idx = threadIdx.x; idx < 2 * kKeys * vec_per_key; idx += kThreads) {
      const int kv = idx / (kKeys * vec_per_key);
      const int rem = idx % (kKeys * vec_per_key);
      const int kk = rem / vec_per_key, vec = rem % vec_per_key;
      const int pos = kbase + kk;
      float vals[8];
      if (pos < k_end) {
        const std::int32_t block = p.block_table[tile.block_offset + pos / p.layout.block_size];
        const bf16 *src = p.cache + p.layout.offset(block, p.layer, kv, pos % p.layout.block_size) +
                          std::int64_t(kvh) * hd + vec * 8;
        const uint4 raw = *reinterpret_cast<const uint4 *>(src);
        const bf16 *h = reinterpret_cast<const bf16 *>(&raw);
#pragma unroll
        for (int e = 0; e < 8; ++e) vals[e] = __bfloat162float(h[e]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) vals[e] = 0.0f;
      }
      float *dst = kv == 0 ? k_s + kk * k_stride(hd) + vec * 8 : v_s + kk * hd + vec * 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = vals[e];
    }
    __syncthreads();

#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + i * kWarps;
      if (r >= rows) break;  // warp-uniform
      // Score of (row r, key): lanes (key, half) each sum every other dimension.
      const float *qr = q_s + r * hd;
      const float *kr = k_s + key * k_stride(hd);
      float sc = 0.0f;
      for (int d = half; d < hd; d += 2) sc += qr[d] * kr[d];
      sc += __shfl_xor_sync(0xffffffffu, sc, kKeys);
      const int pos = kbase + key;
      const int qpos = tile.pos0 + r / G;
      if (pos >= k_end || pos > qpos || (p.window > 0 && pos <= qpos - p.window)) sc = -INFINITY;
      float tmax = sc;
      for (int o = kKeys / 2; o > 0; o >>= 1)
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float m_new = fmaxf(m[i], tmax);
      if (m_new == -INFINITY) continue;  // every key so far masked for this row
      const float alpha = __expf(m[i] - m_new);
      const float pr = __expf(sc - m_new);
      float psum = pr;
      for (int o = kKeys / 2; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      l[i] = l[i] * alpha + psum;
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) acc[i][j] *= alpha;
#pragma unroll
      for (int kk = 0; kk < kKeys; ++kk) {
        const float pk = __shfl_sync(0xffffffffu, pr, kk);
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) {
          const int d = lane + 32 * j;
          if (d < hd) acc[i][j] += pk * v_s[kk * hd + d];
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + i * kWarps;
    if (r >= rows) break;
    const int token = tile.q_start + r / G, head = kvh * G + r % G;
    if (p.num_splits == 1) {
      const float inv = attn_row_scale(m[i], l[i], p.sinks, head);
      bf16 *o = p.out + std::int64_t(token) * p.num_q_heads * hd + std::int64_t(head) * hd;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) o[d] = __float2bfloat16(acc[i][j] * inv);
      }
    } else {
      const std::int64_t slot =
          ((std::int64_t(blockIdx.x) * nkv + kvh) * p.num_splits + split) * kAttnMaxRows + r;
      float *po = p.partial_o + slot * hd;
#pragma unroll
      for (int j = 0; j < kDimsPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) po[d] = acc[i][j];
      }
      if (lane == 0) {
        p.partial_ml[slot * 2] = m[i];
        p.partial_ml[slot * 2 + 1] = l[i];
      }
    }
  }
}

// Merges the splits of one (tile, kv head): a warp per row, lanes over dimensions.
__global__ void __launch_bounds__(kThreads) combine_kernel(AttnParams p) {
  const int hd = p.layout.head_dim;
  const int nkv = p.layout.num_kv_heads;
  const int G = p.num_q_heads / nkv;
  const AttnTile tile = p.tiles[blockIdx.x];
  const int kvh = blockIdx.y;
  const int rows = tile.num_q * G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t base = (std::int64_t(blockIdx.x) * nkv + kvh) * p.num_splits;
  for (int r = warp; r < rows; r += kWarps) {
    float mx = -INFINITY;
    for (int sp = 0; sp < p.num_splits; ++sp)
      mx = fmaxf(mx, p.partial_ml[((base + sp) * kAttnMaxRows + r) * 2]);
    float lsum = 0.0f;
    float o[kDimsPerLane] = {};
    if (mx != -INFINITY) {
      for (int sp = 0; sp < p.num_splits; ++sp) {
        const std::int64_t slot = (base + sp) * kAttnMaxRows + r;
        const float ms = p.partial_ml[slot * 2];
        if (ms == -INFINITY) continue;
        const float w = __expf(ms - mx);
        lsum += p.partial_ml[slot * 2 + 1] * w;
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) {
          const int d = lane + 32 * j;
          if (d < hd) o[j] += p.partial_o[slot * hd + d] * w;
        }
      }
    }
    const int token = tile.q_start + r / G, head = kvh * G + r % G;
    const float inv = attn_row_scale(mx, lsum, p.sinks, head);
    bf16 *out = p.out + std::int64_t(token) * p.num_q_heads * hd + std::int64_t(head) * hd;
#pragma unroll
    for (int j = 0; j < kDimsPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) out[d] = __float2bfloat16(o[j] * inv);
    }
  }
}
}  // namespace

void launch_paged_attention(StreamRef s_ref, const AttnParams &p) {
  const cudaStream_t s = s_ref.get("launch_paged_attention");
  if (p.num_tiles <= 0) return;
  const int hd = p.layout.head_dim, nkv = p.layout.num_kv_heads;
  if (hd <= 0 || hd > kAttnMaxHeadDim || hd % 8 != 0 || nkv <= 0 || p.num_q_heads % nkv != 0 ||
      p.tile_q * (p.num_q_heads / nkv) > kAttnMaxRows || p.num_splits < 1 || p.num_splits > 65535 ||
      (p.num_splits > 1 && (!p.partial_o || !p.partial_ml)))
    throw Error(ErrorCode::kInvalidArgument,
                "paged_attention: unsupported shape (head_dim " + std::to_string(hd) + ", heads " +
                    std::to_string(p.num_q_heads) + "/" + std::to_string(nkv) + ", tile_q " +
                    std::to_string(p.tile_q) + ")");
  const std::size_t smem = smem_bytes(hd);
  // Above 48 KiB a kernel must opt in; the attribute is per function, not global state
  // that differs between engines, so setting it on every launch is harmless and cheap.
  if (smem > 48 * 1024)
    KEEL_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  const dim3 grid(p.num_tiles, nkv, p.num_splits);
  paged_attention_kernel<<<grid, kThreads, smem, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("paged_attention");
  if (p.num_splits > 1) launch_attention_combine(s_ref, p);
}

void launch_attention_combine(StreamRef s_ref, const AttnParams &p) {
  const cudaStream_t s = s_ref.get("launch_attention_combine");
  if (p.num_tiles <= 0) return;
  combine_kernel<<<dim3(p.num_tiles, p.layout.num_kv_heads), kThreads, 0, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("attention_combine");
}

}  // namespace keel::cuda
