// The forward pass of the Llama family on the CPU: Llama 2/3.x, Mistral, Qwen2/2.5
// (q/k/v biases), Qwen3 (per-head q/k RMSNorm, explicit head_dim), and their
// mixture-of-experts variants Qwen3-MoE and Mixtral (exec/arch/moe_ffn.h); tied or untied
// embeddings; MHA, GQA, MQA. Each layer runs the steps of its LayerPlan
// (exec/arch/layer_plan.h), the sequence the CUDA runner executes too. Weights are views into
// memory-mapped files (never copied, except the small norm and bias vectors, widened to float32,
// and, under tensor parallelism, this rank's column block of o_proj and down_proj: see
// exec/parallel/shard_plan.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "exec/arch/layer_plan.h"
#include "exec/arch/moe_ffn.h"
#include "exec/cpu/attention.h"
#include "exec/cpu/kv_store.h"
#include "exec/cpu/linear.h"
#include "exec/cpu/rope.h"
#include "exec/exec_context.h"
#include "exec/forward_batch.h"
#include "exec/parallel/communicator.h"
#include "exec/parallel/shard_plan.h"
#include "formats/model_config.h"

namespace keel::arch {

// Finds a tensor by its HF name ("model.layers.0.self_attn.q_proj.weight").
using WeightLookup = std::function<std::optional<TensorView>(const std::string &)>;

// H, G, I are this rank's heads, KV heads and MLP slice (the whole model's when the
// shard plan has one rank).
struct LlamaLayer {
  TensorView wq, wk, wv, wo;        // [H*D, hidden], [G*D, hidden], [G*D, hidden], [hidden, H*D]
  TensorView w_gate, w_up, w_down;  // [I, hidden], [I, hidden], [hidden, I]
  std::vector<float> attn_norm, ffn_norm;  // [hidden]
  std::vector<float> bq, bk, bv;           // [H*D], [G*D], [G*D] (qwen2) or empty
  std::vector<float> bo;                   // [hidden] (llama with attention_bias) or empty
  std::vector<float> q_norm, k_norm;       // [D] (qwen3) or empty
  std::vector<float> sinks;                // [H] attention sink logits (gpt-oss) or empty
  std::unique_ptr<MoeFfn> moe;             // a MoE block instead of w_gate/w_up/w_down
};

// Binds decoder layer l's attention, norms and MLP (a MoeFfn when `sparse`) by their HF
// names; throws Error(kFormat) naming a missing or mis-shaped tensor. Shared by the
// model's layers and the MTP head's block.
LlamaLayer bind_llama_layer(const ModelConfig &cfg, const WeightLookup &lookup, std::int64_t l,
                            bool sparse);

class LlamaModel {
 public:
  // Binds and checks every tensor's presence, shape and dtype; throws Error(kFormat)
  // naming the tensor otherwise. With a shard plan of several ranks, keeps this rank's
  // part (Error(kUnsupported) when the model does not split that way).
  LlamaModel(const ModelConfig &cfg, const WeightLookup &lookup,
             const parallel::ShardPlan *shard = nullptr);

  const ModelConfig &config() const { return cfg_; }
  // Bytes of the weights read per decoded token (all matrices, embeddings row aside;
  // of a MoE block only the router and top_k experts).
  std::int64_t weight_bytes() const;

  const parallel::ShardPlan &shard() const { return shard_; }
  // The token embeddings and the output head (an MTP layer falls back to them).
  const TensorView &embed() const { return embed_; }
  const TensorView &lm_head() const { return lm_head_; }

  // Validates `batch` against the cache, computes it and fills `out`. A sharded model
  // sums its row-parallel outputs and its vocab blocks of the logits over `comm` (all
  // ranks call forward with the same batch, and all end with the same `out`).
  // With kGreedyIds (unsharded only) the head yields each row's argmax in out.sampled
  // (out.sampled_logprobs zero, out.logits empty) without computing a logits row to keep.
  // With batch.want_hidden (unsharded only), out.hidden gets every token's final hidden
  // state before the final norm, or, when batch.hidden_layers names layers, the
  // concatenation of those layers' outputs (an EAGLE-3 head's aux rows; copied as each
  // layer ends, at no cost to a batch that does not ask).
  enum class Head { kLogits, kGreedyIds };
  void forward(const ForwardBatch &batch, ForwardOutput &out, cpu::CpuKvStore &kv, ExecContext &ctx,
               parallel::Communicator *comm = nullptr, Head head = Head::kLogits);

  // Throws Error(kInvalidArgument) naming what is wrong with `batch`.
  void validate(const ForwardBatch &batch, const cpu::CpuKvStore &kv) const;

 private:
  ModelConfig cfg_;
  parallel::ShardPlan shard_;
  std::deque<std::string> owned_;  // copied column blocks (sharded o/down); never moves
  TensorView embed_;               // [vocab, hidden]
  TensorView lm_head_;             // [vocab, hidden] (the embedding when tied)
  std::vector<float> final_norm_;
  std::vector<LlamaLayer> layers_;
  std::vector<LayerPlan> plans_;  // [num_layers]
  cpu::RopeTable rope_;
  cpu::LinearScratch lin_scratch_;
  std::vector<std::vector<float>> attn_scores_;  // per thread
};

}  // namespace keel::arch
