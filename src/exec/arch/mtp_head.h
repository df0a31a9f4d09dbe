// The multi-token-prediction layer of a Llama-family mixture of experts (GLM-4.5's
// glm4_moe: num_nextn_predict_layers, stored as decoder layer num_hidden_layers) on the
// CPU, as a drafter runs it (exec/mtp_step.h). For position t, with the target's
// pre-norm hidden state h_t and the next token x_{t+1}:
//   e = enorm(embed(x_{t+1})) (zero at position 0, as vLLM and SGLang mask it),
//   u = eh_proj([e ; hnorm(h_t)]), h' = the layer's decoder block over u (attention over
//   the MTP positions' own keys and values, then its MoE or MLP),
//   logits = shared_head.head(shared_head.norm(h')).
// embed_tokens and shared_head.head are the layer's own when stored, else the target's.
// Only the first MTP layer is bound: chained drafts reuse it (as vLLM does with one).
#pragma once

#include <cstdint>
#include <vector>

#include "exec/arch/llama.h"
#include "exec/mtp_step.h"

namespace keel::arch {

class MtpHead {
 public:
  // Throws Error(kUnsupported) when `cfg` has no MTP layer, Error(kFormat) naming the
  // tensor that is missing or mis-shaped.
  MtpHead(const ModelConfig &cfg, const WeightLookup &lookup, const TensorView &target_embed,
          const TensorView &target_head);

  // Entries of MtpCache::rows per position: the layer's K then V.
  std::int64_t cache_row_floats() const { return 2 * cfg_.num_kv_heads * cfg_.head_dim; }
  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out, ExecContext &ctx);

 private:
  ModelConfig cfg_;
  std::int64_t layer_;  // its index in the files
  TensorView embed_, head_, eh_proj_;
  std::vector<float> enorm_, hnorm_, head_norm_;
  LlamaLayer block_;
  cpu::RopeTable rope_;
  cpu::LinearScratch scratch_;
};

}  // namespace keel::arch
