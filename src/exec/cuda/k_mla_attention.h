// Multi-head latent attention (DeepSeek-V3 / Kimi K2, exec/arch/mla.h) on the CUDA runner,
// in the weight-absorbed form over the latent KV cache (KvLayout planes 1: a token's row
// of one layer is [c (kv_lora) | k_rope (rope) | DSA index key, if any] bf16). Straightforward
// kernels, correctness first: one CTA per (query token, head), fp32 online softmax over the
// sequence's cached rows (or DSA's selected ones). No split-K, no tensor cores.
#pragma once

#include <cstdint>

#include "exec/cuda/kernels.h"

namespace keel::cuda {

// The rope part of MLA (qk_rope_head_dim values of each q head and of the latent row).
struct MlaRope {
  const float *inv_freq = nullptr;  // [rope / 2] (rope_table.h over qk_rope_head_dim)
  float mscale = 1.0f;              // multiplies cos and sin (yarn's attention factor)
  bool interleaved = false;         // pairs (2i, 2i+1); else (i, i + rope / 2)
};

// rows [T, n] bf16 normed in place: x / sqrt(mean(x^2) + eps) * weight, in fp32.
// Row t starts at rows + t * row_stride (q_a's latent; kv_a's c part).
void launch_rmsnorm_rows(StreamRef s, bf16 *rows, int T, int n, int row_stride, const bf16 *weight,
                         float eps);

// The latent cache rows of one layer: for each token t with slots[t] >= 0 (padding
// skipped), cache row (slots[t] / block_size, layer, slots[t] % block_size) =
// [rmsnorm(ckv[t, :kv_lora]) * norm | rope(ckv[t, kv_lora:], positions[t])].
// ckv [T, kv_lora + rope] bf16 (kv_a_proj_with_mqa's output), norm [kv_lora] bf16. A row
// longer than kv_lora + rope (DSA's index key after them) gets zeros there, as the CPU's
// rows of the layers that keep no index key.
void launch_mla_kv_write(StreamRef s, const bf16 *ckv, int T, int kv_lora, int rope,
                         const bf16 *norm, float eps, const std::int32_t *positions,
                         const MlaRope &rp, const std::int32_t *slots, bf16 *cache,
                         const KvLayout &layout, int layer);

struct MlaAttnParams {
  const bf16 *q = nullptr;  // [T, H, nope + rope] (q_b_proj's output; rope part not roped)
  const bf16 *kv_b =
      nullptr;  // [H, nope + v, kv_lora]: per head W_kb [nope, kv_lora], W_vb [v, kv_lora]
  const AttnTile *tiles = nullptr;  // [num_tiles] (device): every query token in exactly one tile
  int num_tiles = 0;
  const std::int32_t *block_table = nullptr;  // device
  const bf16 *cache = nullptr;
  KvLayout layout;  // planes 1, num_kv_heads 1, head_dim kv_lora + rope
  int layer = 0;
  int num_heads = 0, nope = 0, rope = 0, v = 0, kv_lora = 0;
  float scale = 0;  // MlaConfig::softmax_scale
  MlaRope rp;
  bf16 *out = nullptr;  // [T, H, v]
  // DSA (k_dsa_indexer.h): a query at position p with p + 1 > topk reads only the topk
  // positions sel[t * topk ..] (any order); null: every query reads 0..p.
  const std::int32_t *sel = nullptr;
  int topk = 0;
};

// For each tile, each of its queries t (position p = pos0 + j) and head h:
//   qa = W_kb[h]^T q_nope[t, h]; qr = rope(q_rope[t, h], p)
//   s_k = (qa . c_k + qr . kr_k) * scale for the keys k in [0, p] of the tile's sequence
//         (or, with p.sel and p + 1 > topk, for the topk keys sel[t * topk ..])
//   out[t, h] = W_vb[h] (sum_k softmax(s)_k c_k)
// Throws Error(kInvalidArgument) on shapes the kernel does not take (kv_lora or rope odd,
// shared memory over the device's limit).
void launch_mla_attention(StreamRef s, const MlaAttnParams &p);

}  // namespace keel::cuda
