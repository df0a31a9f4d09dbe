// The multi-token-prediction layer of a mixture of experts (num_nextn_predict_layers,
// stored as decoder layer num_hidden_layers) on the CPU, as a drafter runs it
// (exec/mtp_step.h): GLM-4.5's (glm4_moe, a GQA block), DeepSeek-V3's (deepseek_v3 and
// Kimi K2, an MLA block, exec/arch/mla.h) or GLM-5's (glm_moe_dsa: an MLA block with its
// own DSA indexer, selecting over the MTP positions' own index keys). For position t, with
// the target's last hidden state h_t and the next token x_{t+1}:
//   e = enorm(embed(x_{t+1})) (zero at position 0, as vLLM and SGLang mask it),
//   g = hnorm(norm(h_t)), norm the target's final RMSNorm (model.norm.weight): the MTP
//   layer reads the vector the target's LM head reads, as vLLM, SGLang and Megatron's MTP
//   training give it (the runner's rows, ForwardOutput::hidden, are before that norm),
//   u = eh_proj([e ; g]), h' = the layer's decoder block over u (attention over the MTP
//   positions' own keys and values, or latent rows, then its MoE or MLP),
//   logits = shared_head.head(shared_head.norm(h')).
// A chained draft feeds h' back as h (MtpInput::chained): g = hnorm(h'), without the
// target's norm, as vLLM's MTP proposer chains the layer's output.
// embed_tokens and shared_head.head are the layer's own when stored, else the target's.
// Only the first MTP layer is bound: chained drafts reuse it (as vLLM does with one).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/arch/llama.h"
#include "exec/arch/mla.h"
#include "exec/mtp_step.h"

namespace keel::arch {

class MtpHead {
 public:
  // Throws Error(kUnsupported) when `cfg` has no MTP layer, Error(kFormat) naming the
  // tensor (GLM-5's: its indexer's too) that is missing or mis-shaped.
  MtpHead(const ModelConfig &cfg, const WeightLookup &lookup, const TensorView &target_embed,
          const TensorView &target_head);

  // Entries of MtpCache::rows per position: the layer's K then V, or its latent row.
  std::int64_t cache_row_floats() const {
    return mla_ ? cfg_.mla->latent_values() : 2 * cfg_.num_kv_heads * cfg_.head_dim;
  }
  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out, ExecContext &ctx);

 private:
  // The decoder block over x ([n, hidden], updated in place) at positions `pos`, its
  // rows already in `cache` (sized to the last position).
  void gqa_block(MtpCache &cache, float *x, std::int64_t n, const std::int32_t *pos,
                 ExecContext &ctx);
  void mla_block(MtpCache &cache, float *x, std::int64_t n, const std::int32_t *pos,
                 ExecContext &ctx);

  ModelConfig cfg_;
  std::int64_t layer_;  // its index in the files
  TensorView embed_, head_, eh_proj_;
  std::vector<float> enorm_, hnorm_, head_norm_;
  std::vector<float> target_norm_;  // the target's final norm, model.norm.weight
  LlamaLayer block_;                // GQA models
  std::unique_ptr<MlaLayer> mla_;   // MLA models
  cpu::RopeTable rope_;
  cpu::LinearScratch scratch_;
};

}  // namespace keel::arch
