// The forward pass of the multi-head latent attention family on the CPU: DeepSeek-V3 / R1
// and Kimi K2 (deepseek_v3) and GLM-5 (glm_moe_dsa, with DeepSeek Sparse Attention's
// indexer, exec/arch/dsa_indexer.h). Dense first layers, then GLM-4.5's grouped sigmoid
// mixture of experts with a shared expert (exec/arch/moe_ffn.h).
//
// A layer, in the weight-absorbed form (formats/mla_config.h names the tensors):
//   h      = rmsnorm(x)                                   [T, hidden]
//   q      = q_b(rmsnorm(q_a h)) (or q_proj h)            [T, H, nope + rope], rope part roped
//   c, kr  = split(kv_a h); c = rmsnorm(c); kr = rope(kr) [T, kv_lora], [T, rope]
//   cache row (KvLayout::kLatent) = [c | kr | DSA index key]
//   per head: qa = W_kb^T q_nope                           [kv_lora]
//             p  = softmax((qa . c_s + q_rope . kr_s) * softmax_scale) over the positions s
//                  kept (all earlier ones; with DSA the indexer's top index_topk)
//             o  = W_vb (sum_s p_s c_s)                    [v]
//   x     += o_proj o; x += MLP or MoE of rmsnorm(x)
// W_kb / W_vb are kv_b_proj's per-head row blocks, held in float32 (H (nope + v) kv_lora
// values a layer). Decode reads kv_lora + rope values a cached token and head, not 2 x
// heads x head_dim; prefill uses the same absorbed form (no expansion).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor_view.h"
#include "exec/arch/dsa_indexer.h"
#include "exec/arch/llama.h"
#include "exec/arch/moe_ffn.h"
#include "exec/arch/weight_binding.h"
#include "exec/cpu/kv_store.h"
#include "exec/cpu/linear.h"
#include "exec/cpu/rope.h"
#include "exec/exec_context.h"
#include "exec/forward_batch.h"
#include "formats/model_config.h"

namespace keel::arch {

struct MlaLayer {
  TensorView q_a, q_b, q;                  // [q_lora, hidden], [H qk, q_lora] | [H qk, hidden]
  std::vector<float> q_a_norm;             // [q_lora] (empty without q_lora_rank)
  TensorView kv_a;                         // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;            // [kv_lora]
  std::vector<float> kv_b;                 // [H, nope + v, kv_lora] float32
  TensorView o;                            // [hidden, H v]
  std::vector<float> b_q_a, b_kv_a, b_o;   // attention_bias: [q_lora], [kv_lora + rope], [hidden]
  std::unique_ptr<DsaIndexer> indexer;     // DSA layers that select (not "shared" ones)
  TensorView w_gate, w_up, w_down;         // dense MLP: [I, hidden], [I, hidden], [hidden, I]
  std::unique_ptr<MoeFfn> moe;             // sparse layers
  std::vector<float> attn_norm, ffn_norm;  // [hidden]
};

// Binds and checks layer `l`'s tensors (a MoE block when `sparse`); throws Error(kFormat)
// naming a missing or mis-shaped one. The MTP head binds its layer (num_hidden_layers) so.
MlaLayer bind_mla_layer(const ModelConfig &cfg, const WeightLookup &lookup, std::int64_t l,
                        bool sparse);
// The rope table over qk_rope_head_dim (the indexer's rope part too).
cpu::RopeTable make_mla_rope(const ModelConfig &cfg);

// The latent row (latent_values() floats) of position p of token t's sequence: a layer
// writes it at t's own position and reads every earlier one. The model's paged cache, or
// the MTP head's own rows.
using LatentRowFn = std::function<float *(std::int64_t t, std::int32_t p)>;

// One step of a decoder layer over T tokens (their positions `pos`): x += attention(x);
// x += MLP or MoE. Buffers come from `ws` (one set a step, made by the constructor).
class MlaLayerStep {
 public:
  MlaLayerStep(const ModelConfig &cfg, const cpu::RopeTable &rope, std::int64_t T,
               const std::int32_t *pos, LatentRowFn row, Workspace &ws);
  // `selection` ([T]) carries a DSA layer's choice to the "shared" layers after it.
  void run(const MlaLayer &L, float *x, std::vector<std::vector<std::int32_t>> &selection,
           ThreadPool &pool, cpu::LinearScratch &scratch);

 private:
  void attend(const MlaLayer &L, std::vector<std::vector<std::int32_t>> &selection, bool select,
              ThreadPool &pool);

  const ModelConfig &cfg_;
  const MlaConfig &m_;
  const cpu::RopeTable &rope_;
  std::int64_t T_;
  const std::int32_t *pos_;
  LatentRowFn row_;
  Workspace &ws_;
  float *h_, *qr_, *q_, *c_, *att_, *gate_, *up_, *moe_out_, *ik_, *iq_, *iw_;
};

class MlaModel {
 public:
  // Binds and checks every tensor; throws Error(kFormat) naming a missing or mis-shaped one.
  MlaModel(const ModelConfig &cfg, const WeightLookup &lookup);

  const ModelConfig &config() const { return cfg_; }
  const TensorView &embed() const { return embed_; }
  const TensorView &lm_head() const { return lm_head_; }
  // Values a token leaves in the cache per layer (kv_values_per_token_layer).
  std::int64_t latent_values() const { return cfg_.mla->latent_values(); }
  std::int64_t weight_bytes() const;

  // As LlamaModel::forward (unsharded, with batch.want_hidden too): kv is a latent store
  // of latent_values() a row.
  void forward(const ForwardBatch &batch, ForwardOutput &out, cpu::CpuKvStore &kv, ExecContext &ctx,
               LlamaModel::Head head = LlamaModel::Head::kLogits);

 private:
  ModelConfig cfg_;
  MlaConfig m_;
  TensorView embed_, lm_head_;
  std::vector<float> final_norm_;
  std::vector<MlaLayer> layers_;
  cpu::RopeTable rope_;  // over qk_rope_head_dim (the indexer's rope part too)
  cpu::LinearScratch lin_scratch_;
};

}  // namespace keel::arch
