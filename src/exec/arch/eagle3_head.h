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

// The files of an EAGLE-3 head, loaded and checked against its target: what the CPU head
// computes with and the CUDA head (exec/cuda/cuda_eagle3_head.h) uploads.
struct Eagle3Weights {
  // Opens the head in directory `dir` for a target of config `target` whose token
  // embedding is `target_embed` (used when the head stores none; only its shape is read
  // here, so a runner whose embedding lives on a device passes a view without data).
  // Throws Error(kFormat) naming the tensor that is missing or mis-shaped (fc not
  // [hidden, aux x target hidden], d2t not [draft_vocab_size], ...), or the config field
  // that does not fit the target (hidden_size, vocab_size, aux layers).
  Eagle3Weights(const std::filesystem::path &dir, const ModelConfig &target,
                const TensorView &target_embed);
  ~Eagle3Weights();
  Eagle3Weights(const Eagle3Weights &) = delete;
  Eagle3Weights &operator=(const Eagle3Weights &) = delete;

  // The target id of draft id d.
  TokenId target_id(std::int64_t d) const {
    return static_cast<TokenId>(d + d2t[static_cast<std::size_t>(d)]);
  }

  Eagle3Config cfg;
  std::unique_ptr<SafetensorsModel> files;  // what the views below point into
  std::vector<std::int32_t> aux;            // the target layers feeding fc, in order
  // embed is the head's embed_tokens when own_embed, else target_embed.
  TensorView embed, fc, wq, wk, wv, wo, w_gate, w_up, w_down, lm_head;
  bool own_embed = false;
  std::vector<float> input_norm, hidden_norm, post_norm, norm;  // [hidden] each
  std::vector<std::int64_t> d2t;                                // [draft_vocab]
  std::int64_t bytes = 0;  // the head's own tensors as stored (a borrowed embedding not counted)
};

class Eagle3Head {
 public:
  // Opens the head (Eagle3Weights; `target_embed` kept by the caller).
  Eagle3Head(const std::filesystem::path &dir, const ModelConfig &target,
             const TensorView &target_embed);

  const Eagle3Config &config() const { return w_.cfg; }
  // The target layers whose outputs feed fc, in order (ForwardBatch::hidden_layers).
  const std::vector<std::int32_t> &aux_layers() const { return w_.aux; }
  std::int64_t hidden_size() const { return w_.cfg.layer.hidden_size; }
  std::int64_t aux_width() const { return w_.fc.shape[1]; }
  // Entries of MtpCache::rows per position: the layer's K then V.
  std::int64_t cache_row_floats() const {
    return 2 * w_.cfg.layer.num_kv_heads * w_.cfg.layer.head_dim;
  }
  // Bytes of the head's own tensors (the target's embedding, when borrowed, not counted).
  std::int64_t weights_bytes() const { return w_.bytes; }
  // The target id of draft id d.
  TokenId target_id(std::int64_t d) const { return w_.target_id(d); }

  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out, ExecContext &ctx);

 private:
  Eagle3Weights w_;
  cpu::RopeTable rope_;
  cpu::LinearScratch scratch_;
};

}  // namespace keel::arch
