// An EAGLE-3 draft head on the CPU (`--speculative eagle3:PATH`; formats/eagle3_config.h
// for its files). Position t takes the target's hidden states of its aux layers at t
// (ForwardBatch::hidden_layers: the concatenation a = [h_l1 ; h_l2 ; h_l3], each the output
// of that target layer) and the token x_{t+1}, as vLLM's and SGLang's llama_eagle3 compute it:
//   g = fc(a)                                      (a chained position: g = the previous h')
//   e = input_layernorm(embed(x_{t+1})),  n = hidden_norm(g)
//   r = g (n with norm_before_residual)
//   x = o_proj(attention(rope(q, k, v of [e ; n]))) + r   (over the head's own positions)
//   h' = x + mlp(post_attention_layernorm(x))              (returned: before `norm`)
//   logits = lm_head(norm(h'))   over the draft vocabulary; the guess is the target id
//   d + d2t[d] of the argmax d.
// embed is the head's embed_tokens when stored, else the target's. The head keeps no
// state: the caller's MtpCache holds its keys and values per position (exec/mtp_step.h; an
// MtpInput's `hidden` is [n, aux x target_hidden], or [n, hidden] when `chained`, and
// MtpOutput::argmax holds target ids, `logits` the draft vocabulary's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/tensor_view.h"
#include "exec/arch/weight_binding.h"
#include "exec/cpu/linear.h"
#include "exec/cpu/rope.h"
#include "exec/exec_context.h"
#include "exec/mtp_step.h"
#include "formats/eagle3_config.h"

namespace keel {
class SafetensorsModel;
}

namespace keel::arch {

class Eagle3Head {
 public:
  // Opens the head in directory `dir` for a target of config `target` whose token
  // embedding is `target_embed` (kept by the caller; used when the head stores none).
  // Throws Error(kFormat) naming the tensor that is missing or mis-shaped (fc not
  // [hidden, aux x target hidden], d2t not [draft_vocab_size], ...), or the config field
  // that does not fit the target (hidden_size, vocab_size, aux layers).
  Eagle3Head(const std::filesystem::path &dir, const ModelConfig &target,
             const TensorView &target_embed);
  ~Eagle3Head();

  const Eagle3Config &config() const { return cfg_; }
  // The target layers whose outputs feed fc, in order (ForwardBatch::hidden_layers).
  const std::vector<std::int32_t> &aux_layers() const { return aux_; }
  std::int64_t hidden_size() const { return cfg_.layer.hidden_size; }
  std::int64_t aux_width() const { return fc_.shape[1]; }
  // Entries of MtpCache::rows per position: the layer's K then V.
  std::int64_t cache_row_floats() const {
    return 2 * cfg_.layer.num_kv_heads * cfg_.layer.head_dim;
  }
  // Bytes of the head's own tensors (the target's embedding, when borrowed, not counted).
  std::int64_t weights_bytes() const { return weights_bytes_; }
  // The target id of draft id d.
  TokenId target_id(std::int64_t d) const {
    return static_cast<TokenId>(d + d2t_[static_cast<std::size_t>(d)]);
  }

  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out, ExecContext &ctx);

 private:
  Eagle3Config cfg_;
  std::unique_ptr<SafetensorsModel> files_;
  std::vector<std::int32_t> aux_;
  TensorView embed_, fc_, wq_, wk_, wv_, wo_, w_gate_, w_up_, w_down_, lm_head_;
  std::vector<float> input_norm_, hidden_norm_, post_norm_, norm_;
  std::vector<std::int64_t> d2t_;  // [draft_vocab]
  std::int64_t weights_bytes_ = 0;
  cpu::RopeTable rope_;
  cpu::LinearScratch scratch_;
};

}  // namespace keel::arch
