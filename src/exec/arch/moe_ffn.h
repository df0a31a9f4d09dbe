// A mixture-of-experts feed-forward block on the CPU (Qwen3-MoE, Mixtral, GLM-4.5,
// gpt-oss): a router picks each token's top-k experts (softmax, GLM's grouped sigmoid
// with a score-correction bias, or gpt-oss's softmax over the k best biased logits), each
// expert is a SwiGLU MLP (gpt-oss: with biases and a clamped SwiGLU), and the token's
// output is the weighted sum of its experts' outputs (plus a shared expert's, GLM). Tokens are
// grouped by expert, so a batch reads each chosen expert's weights once, and only the chosen
// experts' weights are read at all. Few tokens per expert (decode): the threads split
// the experts between them, one whole expert each at a time; many (prefill): the
// experts run one after another, each split over the threads by rows. Both give the
// same bits (linear() is batch invariant, and each token sums its experts in index
// order), so a token's output never depends on what else is in its batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "exec/cpu/linear.h"
#include "exec/exec_context.h"
#include "formats/model_config.h"

namespace keel::arch {

// Finds a tensor by its HF name (the same lookup llama.h declares).
using WeightLookup = std::function<std::optional<TensorView>(const std::string &)>;

struct ExpertWeights {
  TensorView gate, up, down;  // [I, hidden], [I, hidden], [hidden, I]
  // gpt-oss: f32 copies of the biases, [I], [I], [hidden]; empty when the model has none.
  std::vector<float> gate_bias, up_bias, down_bias;
};

// One token's routing: k expert ids (best first) and their weights.
// logits: [E]; ids, weights: [k]. Softmax over all E in double, top-k (ties go to the
// lower index, as torch.topk does on CPU), renormalized when `norm_topk_prob`.
void route_token(const float *logits, std::int64_t E, std::int64_t k, bool norm_topk_prob,
                 std::int32_t *ids, float *weights);

// GLM-4.5's routing ("noaux_tc") for one token, as transformers computes it: s =
// sigmoid(logits); choice = s + bias ([E]); each of the n_group groups is worth the sum
// of its two best choice scores; outside the topk_group best groups choice is 0; the k
// best choices win (ties to the lower index); their weights are s (not choice),
// divided by their sum (+1e-20) with norm_topk_prob, times `scale`.
void route_token_grouped_sigmoid(const float *logits, const float *bias, std::int64_t E,
                                 std::int64_t k, std::int64_t n_group, std::int64_t topk_group,
                                 bool norm_topk_prob, double scale, std::int32_t *ids,
                                 float *weights);

// gpt-oss's routing for one token (MoeConfig::Scoring::kTopkSoftmax): the k largest
// logits (already biased; ties to the lower index), weighted by a softmax over those k
// alone (in double).
void route_token_topk_softmax(const float *logits, std::int64_t E, std::int64_t k,
                              std::int32_t *ids, float *weights);

// gpt-oss's clamped SwiGLU, n elements: g = min(gate, limit), u = clamp(up, -limit,
// limit), out = (u + 1) * g * sigmoid(alpha * g). out may alias gate.
void clamped_swiglu(const float *gate, const float *up, float *out, std::int64_t n, float limit,
                    float alpha);

class MoeFfn {
 public:
  // Binds layer `layer`'s router and experts; throws Error(kFormat) naming the tensor
  // that is missing or mis-shaped (a router whose width is not hidden_size or whose
  // rows are not the config's expert count, an expert fewer than the config says).
  MoeFfn(const ModelConfig &cfg, std::int64_t layer, const WeightLookup &lookup);

  // h: [T, hidden] (the normed residual); y: [T, hidden], overwritten (routed experts,
  // then the shared expert added, as transformers sums them).
  void forward(const float *h, std::int64_t T, float *y, ThreadPool &pool,
               cpu::LinearScratch &scratch, Workspace &ws);

  // Bytes read for one decoded token: the router, top_k experts and the shared one.
  std::int64_t active_bytes() const;
  const std::vector<ExpertWeights> &experts() const { return experts_; }
  const TensorView &router() const { return router_; }

 private:
  void route(const float *logits, std::int64_t T, std::int32_t *ids, float *w) const;

  std::int64_t hidden_, I_, E_, k_;
  MoeConfig moe_;
  TensorView router_;                   // [E, hidden]
  std::vector<float> correction_bias_;  // [E] (sigmoid routing) or empty
  std::vector<float> router_bias_;      // [E] added to the logits (gpt-oss) or empty
  std::vector<ExpertWeights> experts_;
  std::optional<ExpertWeights> shared_;  // [S, hidden], [S, hidden], [hidden, S]
  // Per pool thread, for the expert-parallel path: a one-thread pool (runs inline)
  // and its linear scratch.
  struct Worker {
    ThreadPool inline_pool{1};
    cpu::LinearScratch scratch;
  };
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace keel::arch
