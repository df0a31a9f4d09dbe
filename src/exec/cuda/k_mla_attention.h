// Multi-head latent attention (DeepSeek-V3 / Kimi K2, exec/arch/mla.h) on the CUDA runner,
// in the weight-absorbed form over the latent KV cache (KvLayout planes 1: a token's row
// of one layer is [c (kv_lora) | k_rope (rope) | DSA index key, if any] bf16). Two attention
// paths, the same math: the split one (MlaAttnParams::num_splits > 0; k_mla_split.cu) for
// decode-size steps, heads in groups of 16 on the tensor cores sharing each latent row read,
// the keys split over CTAs (flash-decoding), then a combine, which the runner also gives
// prefills a chunk of rows at a time (CudaKernelChoices::mla_prefill_chunks); and the simple
// one (one CTA per (tile, head), fp32 online softmax on CUDA cores).
#pragma once

#include <cstddef>
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
  // The split path (decode-size steps): > 0 splits each query's keys (or selection) into
  // this many ranges; 0: the simple kernel. It needs T (the step's token rows: queries
  // index 0..T-1) and the scratch of mla_split_scratch_bytes(T, ...) at `scratch`
  // (256-byte aligned).
  int num_splits = 0;
  int T = 0;
  void *scratch = nullptr;
};

// Bytes of scratch the split path needs for T token rows: qa [T, H, kv_lora] bf16, then the
// partials [T, splits, H, kv_lora + 2] f32 (the weighted latent sum, m, l).
std::size_t mla_split_scratch_bytes(int T, int num_heads, int kv_lora, int splits);
// Whether the split path takes these shapes: kv_lora % 16 == 0 and <= 512, (kv_lora + rope)
// % 8 == 0 and <= 640, cache rows of a multiple of 8 values (16-byte copies).
bool mla_split_supported(int kv_lora, int rope, int row_elems);
// Heads a CTA of the split path takes (the M of its m16n8k16 tiles; fewer heads are padded).
constexpr int kMlaHeadGroup = 16;

// For each tile, each of its queries t (position p = pos0 + j) and head h:
//   qa = W_kb[h]^T q_nope[t, h]; qr = rope(q_rope[t, h], p)
//   s_k = (qa . c_k + qr . kr_k) * scale for the keys k in [0, p] of the tile's sequence
//         (or, with p.sel and p + 1 > topk, for the topk keys sel[t * topk ..])
//   out[t, h] = W_vb[h] (sum_k softmax(s)_k c_k)
// With num_splits > 0 (the split path): qa rounded to bf16 (the tensor cores' input), the
// probabilities to bf16 for the value products; m, l and the sums in fp32.
// Throws Error(kInvalidArgument) on shapes the kernels do not take (kv_lora or rope odd,
// shared memory over the device's limit, !mla_split_supported with num_splits > 0, no
// scratch).
void launch_mla_attention(StreamRef s, const MlaAttnParams &p);

}  // namespace keel::cuda
