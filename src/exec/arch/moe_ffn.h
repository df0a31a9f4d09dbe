// A mixture-of-experts feed-forward block on the CPU (Qwen3-MoE, Mixtral): a router
// picks each token's top-k experts by softmax, each expert is a SwiGLU MLP, and the
// token's output is the weighted sum of its experts' outputs. Tokens are grouped by
// expert, so a batch reads each chosen expert's weights once, and only the chosen
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
};

// One token's routing: k expert ids (best first) and their weights.
// logits: [E]; ids, weights: [k]. Softmax over all E in double, top-k (ties go to the
// lower index, as torch.topk does on CPU), renormalized when `norm_topk_prob`.
void route_token(const float *logits, std::int64_t E, std::int64_t k, bool norm_topk_prob,
                 std::int32_t *ids, float *weights);

class MoeFfn {
 public:
  // Binds layer `layer`'s router and experts; throws Error(kFormat) naming the tensor
  // that is missing or mis-shaped (a router whose width is not hidden_size or whose
  // rows are not the config's expert count, an expert fewer than the config says).
  MoeFfn(const ModelConfig &cfg, std::int64_t layer, const WeightLookup &lookup);

  // h: [T, hidden] (the normed residual); y: [T, hidden], overwritten.
  void forward(const float *h, std::int64_t T, float *y, ThreadPool &pool,
               cpu::LinearScratch &scratch, Workspace &ws);

  // Bytes read for one decoded token: the router and top_k experts.
  std::int64_t active_bytes() const;
  const std::vector<ExpertWeights> &experts() const { return experts_; }
  const TensorView &router() const { return router_; }

 private:
  std::int64_t hidden_, I_, E_, k_;
  bool norm_topk_prob_;
  TensorView router_;  // [E, hidden]
  std::vector<ExpertWeights> experts_;
  // Per pool thread, for the expert-parallel path: a one-thread pool (runs inline)
  // and its linear scratch.
  struct Worker {
    ThreadPool inline_pool{1};
    cpu::LinearScratch scratch;
  };
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace keel::arch
