// Multi-head latent attention kernels (k_mla_attention.h): the latent cache write and the
// absorbed attention. Layout of the cache row a token leaves per layer (KvLayout planes 1,
// one "head" of kv_lora + rope values): [c (kv_lora, rmsnormed) | k_rope (rope, roped)].
//
// mla_attention_kernel: grid (tile, head), kThreads threads. For each query of the tile, in
// shared memory (fp32): qn [nope] (q_nope), qr [rope] (q_rope roped), qa [kv_lora]
// (= W_kb^T qn), lat [kv_lora] (the running softmax-weighted sum of c); then keys in chunks
// of kChunk: one warp a key's score (qa . c + qr . kr) * scale, an online-softmax update
// (m, l kept identically by every thread), each thread adding p_k c_k[r] for its own r's;
// finally out = W_vb lat / l, one warp per output value.
#include <string>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_mla_attention.h"
#include "exec/cuda/k_mla_rope.cuh"
#include "exec/cuda/k_mla_split.h"
#include "exec/cuda/k_reduce.cuh"

namespace keel::cuda {

namespace {

using reduce::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 64;  // keys scored per online-softmax step

using mla_detail::rope_index;
using mla_detail::rope_pair;

__global__ void __launch_bounds__(kThreads)
    rmsnorm_rows_kernel(bf16 *rows, int n, int row_stride, const bf16 *weight, float eps) {
  __shared__ float red[kWarps];
  bf16 *x = rows + std::int64_t(blockIdx.x) * row_stride;
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(reduce::block_sum<kThreads>(ss, red) / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += kThreads)
    x[i] = __float2bfloat16(__bfloat162float(x[i]) * inv * __bfloat162float(weight[i]));
}

// One block per token: its normed c and roped k_rope into the cache row of its slot.
__global__ void __launch_bounds__(kThreads)
    mla_kv_write_kernel(const bf16 *ckv, int kv_lora, int rope, const bf16 *norm, float eps,
                        const std::int32_t *positions, MlaRope rp, const std::int32_t *slots,
                        bf16 *cache, KvLayout layout, int layer) {
  __shared__ float red[kWarps];
  const int t = blockIdx.x;
  const std::int32_t slot = slots[t];
  if (slot < 0) return;  // padding row (uniform over the block: no barrier skipped by some)
  const bf16 *in = ckv + std::int64_t(t) * (kv_lora + rope);
  bf16 *row = cache + layout.offset(slot / layout.block_size, layer, 0, slot % layout.block_size);
  for (int i = kv_lora + rope + threadIdx.x; i < layout.slot_elems(); i += kThreads)
    row[i] = __float2bfloat16(0.0f);  // DSA's index key: launch_dsa_key_write's, if any
  float ss = 0;
  for (int i = threadIdx.x; i < kv_lora; i += kThreads) {
    const float v = __bfloat162float(in[i]);
    ss += v * v;
  }
  const float inv =
      rsqrtf(reduce::block_sum<kThreads>(ss, red) / static_cast<float>(kv_lora) + eps);
  for (int i = threadIdx.x; i < kv_lora; i += kThreads)
    row[i] = __float2bfloat16(__bfloat162float(in[i]) * inv * __bfloat162float(norm[i]));
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < rope / 2; i += kThreads) {
    int a, b;
    rope_index(i, rope, rp.interleaved, a, b);
    float y1, y2;
    rope_pair(i, pos, rp, __bfloat162float(in[kv_lora + a]), __bfloat162float(in[kv_lora + b]), y1,
              y2);
    row[kv_lora + a] = __float2bfloat16(y1);
    row[kv_lora + b] = __float2bfloat16(y2);
  }
}

// Floats of the attention kernel's shared memory before its i64 offsets, rounded up to even.
__host__ __device__ int smem_floats(int qk, int kv_lora) {
  return (qk + 2 * kv_lora + 2 * kChunk + 1) / 2 * 2;
}

__global__ void __launch_bounds__(kThreads) mla_attention_kernel(MlaAttnParams p) {
  extern __shared__ float smem[];
  const int R = p.kv_lora, qk = p.nope + p.rope, H = p.num_heads;
  float *qn = smem;         // [nope]
  float *qr = qn + p.nope;  // [rope]
  float *qa = qr + p.rope;  // [R]
  float *lat = qa + R;      // [R]
  float *sc = lat + R;      // [kChunk] scores, then probabilities
  float *pr = sc + kChunk;  // [kChunk]
  // [kChunk] cache offsets, 8-byte aligned after the floats (attention_smem).
  auto *row_at = reinterpret_cast<std::int64_t *>(smem + smem_floats(p.nope + p.rope, R));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const AttnTile tile = p.tiles[blockIdx.x];
  const int h = blockIdx.y;
  const int bs = p.layout.block_size;
  const bf16 *wk = p.kv_b + std::int64_t(h) * (p.nope + p.v) * R;  // [nope, R]
  const bf16 *wv = wk + std::int64_t(p.nope) * R;                  // [v, R]

  for (int j = 0; j < tile.num_q; ++j) {
    const int t = tile.q_start + j;
    const int pos = tile.pos0 + j;
    const bf16 *q = p.q + (std::int64_t(t) * H + h) * qk;
    for (int i = threadIdx.x; i < p.nope; i += kThreads) qn[i] = __bfloat162float(q[i]);
    for (int i = threadIdx.x; i < p.rope / 2; i += kThreads) {
      int a, b;
      rope_index(i, p.rope, p.rp.interleaved, a, b);
      rope_pair(i, static_cast<float>(pos), p.rp, __bfloat162float(q[p.nope + a]),
                __bfloat162float(q[p.nope + b]), qr[a], qr[b]);
    }
    __syncthreads();
    // qa[r] = sum_d qn[d] W_kb[d, r]: threads over r read W's rows coalesced.
    for (int r = threadIdx.x; r < R; r += kThreads) {
      float acc = 0;
      for (int d = 0; d < p.nope; ++d) acc += qn[d] * __bfloat162float(wk[std::int64_t(d) * R + r]);
      qa[r] = acc;
      lat[r] = 0;
    }
    __syncthreads();

    // Causal: every cached position up to this one, or DSA's selection of them.
    const bool sparse = p.sel != nullptr && pos + 1 > p.topk;
    const int nkeys = sparse ? p.topk : pos + 1;
    const std::int32_t *sel = sparse ? p.sel + std::int64_t(t) * p.topk : nullptr;
    float m = -INFINITY, l = 0;
    for (int k0 = 0; k0 < nkeys; k0 += kChunk) {
      const int n = min(kChunk, nkeys - k0);
      for (int kk = warp; kk < n; kk += kWarps) {
        const int key = sparse ? sel[k0 + kk] : k0 + kk;
        const std::int32_t block = p.block_table[tile.block_offset + key / bs];
        const std::int64_t off = p.layout.offset(block, p.layer, 0, key % bs);
        const bf16 *row = p.cache + off;
        float dot = 0;
        for (int r = lane; r < R; r += 32) dot += qa[r] * __bfloat162float(row[r]);
        for (int i = lane; i < p.rope; i += 32) dot += qr[i] * __bfloat162float(row[R + i]);
        dot = warp_sum(dot);
        if (lane == 0) {
          sc[kk] = dot * p.scale;
          row_at[kk] = off;
        }
      }
      __syncthreads();
      float cmax = -INFINITY;
      for (int kk = 0; kk < n; ++kk) cmax = fmaxf(cmax, sc[kk]);
      const float m_new = fmaxf(m, cmax);
      const float corr = __expf(m - m_new);  // 0 on the first chunk (m = -inf)
      for (int kk = threadIdx.x; kk < n; kk += kThreads) pr[kk] = __expf(sc[kk] - m_new);
      __syncthreads();
      float psum = 0;
      for (int kk = 0; kk < n; ++kk) psum += pr[kk];
      l = l * corr + psum;
      m = m_new;
      for (int r = threadIdx.x; r < R; r += kThreads) {
        float acc = lat[r] * corr;
        for (int kk = 0; kk < n; ++kk) acc += pr[kk] * __bfloat162float(p.cache[row_at[kk] + r]);
        lat[r] = acc;
      }
      __syncthreads();  // sc, pr, row_at are rewritten by the next chunk
    }
    const float inv_l = 1.0f / l;
    // out[t, h, d] = sum_r W_vb[d, r] lat[r] / l: one warp per d.
    for (int d = warp; d < p.v; d += kWarps) {
      const bf16 *w = wv + std::int64_t(d) * R;
      float acc = 0;
      for (int r = lane; r < R; r += 32) acc += __bfloat162float(w[r]) * lat[r];
      acc = warp_sum(acc);
      if (lane == 0) p.out[(std::int64_t(t) * H + h) * p.v + d] = __float2bfloat16(acc * inv_l);
    }
    __syncthreads();  // qn, qr, qa, lat are rewritten by the next query
  }
}

std::size_t attention_smem(const MlaAttnParams &p) {
  return static_cast<std::size_t>(smem_floats(p.nope + p.rope, p.kv_lora)) * sizeof(float) +
         kChunk * sizeof(std::int64_t);
}

}  // namespace

void launch_rmsnorm_rows(StreamRef s_ref, bf16 *rows, int T, int n, int row_stride,
                         const bf16 *weight, float eps) {
  const cudaStream_t s = s_ref.get("launch_rmsnorm_rows");
  if (n <= 0 || row_stride < n)
    throw Error(ErrorCode::kInvalidArgument, "launch_rmsnorm_rows: n " + std::to_string(n) +
                                                 " row_stride " + std::to_string(row_stride));
  if (T <= 0) return;
  rmsnorm_rows_kernel<<<T, kThreads, 0, s>>>(rows, n, row_stride, weight, eps);
  KEEL_CUDA_CHECK_LAUNCH("rmsnorm_rows");
}

void launch_mla_kv_write(StreamRef s_ref, const bf16 *ckv, int T, int kv_lora, int rope,
                         const bf16 *norm, float eps, const std::int32_t *positions,
                         const MlaRope &rp, const std::int32_t *slots, bf16 *cache,
                         const KvLayout &layout, int layer) {
  const cudaStream_t s = s_ref.get("launch_mla_kv_write");
  if (layout.planes != 1 || layout.slot_elems() < kv_lora + rope || rope % 2 != 0 || kv_lora <= 0 ||
      layer < 0 || layer >= layout.num_layers)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_mla_kv_write: a latent cache of kv_lora " + std::to_string(kv_lora) +
                    " + rope " + std::to_string(rope) + " values (even rope) expected, got " +
                    std::to_string(layout.slot_elems()) + " values in " +
                    std::to_string(layout.planes) + " planes");
  if (T <= 0) return;
  mla_kv_write_kernel<<<T, kThreads, 0, s>>>(ckv, kv_lora, rope, norm, eps, positions, rp, slots,
                                             cache, layout, layer);
  KEEL_CUDA_CHECK_LAUNCH("mla_kv_write");
}

void launch_mla_attention(StreamRef s_ref, const MlaAttnParams &p) {
  const cudaStream_t s = s_ref.get("launch_mla_attention");
  if (p.layout.planes != 1 || p.layout.slot_elems() < p.kv_lora + p.rope || p.rope % 2 != 0 ||
      (p.sel != nullptr && p.topk <= 0) || p.kv_lora <= 0 || p.nope <= 0 || p.v <= 0 ||
      p.num_heads <= 0 || p.num_heads > 65535)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_mla_attention: bad shape (heads " + std::to_string(p.num_heads) +
                    ", nope " + std::to_string(p.nope) + ", rope " + std::to_string(p.rope) +
                    ", v " + std::to_string(p.v) + ", kv_lora " + std::to_string(p.kv_lora) +
                    ", cache row " + std::to_string(p.layout.slot_elems()) + ")");
  const std::size_t smem = attention_smem(p);
  if (smem > 48 * 1024)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_mla_attention: " + std::to_string(smem) + " bytes of shared memory");
  if (p.num_tiles <= 0) return;
  if (p.num_splits > 0) {
    launch_mla_split(s, p);
    return;
  }
  mla_attention_kernel<<<dim3(p.num_tiles, p.num_heads), kThreads, smem, s>>>(p);
  KEEL_CUDA_CHECK_LAUNCH("mla_attention");
}

}  // namespace keel::cuda
