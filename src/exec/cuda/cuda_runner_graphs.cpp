// CudaModelRunner's CUDA graphs: a decode step (one token per sequence, or a speculative
// verify's 1 + k, every token a logits row) is padded to a bucket size and replays the
// graph captured for its shape (bucket, attention tiles per kernel and split-K factors),
// captured on first use; every other step (prefill chunks, prompt logprobs), and every
// profiled one, runs eagerly. A step that returns hidden rows replays its own graph, the
// rows' copies captured in it (cuda_runner_hidden.cpp): with a drafter that reads them
// every step does, so running those eagerly would give up the graphs altogether.
#include <algorithm>

#include "exec/cuda/cuda_model_runner.h"

namespace keel::cuda {

bool CudaModelRunner::graph_eligible(const ForwardBatch &b) const {
  const std::int32_t T = b.total_tokens();
  const std::int32_t S = static_cast<std::int32_t>(b.seqs.size());
  bool graph = graphs_enabled_ && !profiler_.enabled() && T > 0 && S > 0;
  // Every token a logits row, in batch order (so the padded rows are 0..Tp-1): one-token
  // decodes and verifies of at most 1 + kMaxGraphDrafts tokens.
  std::int32_t at = 0;
  for (std::int32_t i = 0; graph && i < S; ++i) {
    const SequenceSlice &q = b.seqs[i];
    graph = q.num_tokens >= 1 && q.num_tokens <= 1 + kMaxGraphDrafts && q.token_offset == at &&
            q.first_logits_token() == 0 && q.logits != SequenceSlice::Logits::kAll;
    at += q.num_tokens;
  }
  graph = graph && at == T;
  // Mixture-of-experts layers capture on their fixed-shape GEMV path and on the grouped
  // GEMM (sized from device memory); the per-expert cuBLASLt path reads the group starts
  // on the host.
  if (graph && has_moe_ && graph_bucket(T) > moe_gemv_max_ && !moe_grouped_) graph = false;
  return graph;
}

std::int32_t CudaModelRunner::graph_bucket(std::int32_t n) const {
  const std::int32_t cap = std::min({max_tokens_, max_seqs_, max_rows_});
  std::int32_t b = 1;
  while (b < n && b < 32) b *= 2;
  if (b < n) b = (n + 31) / 32 * 32;
  return std::max(n, std::min(b, cap));
}

void CudaModelRunner::run_step(const StepShape &shape, bool graph) {
  // A graph per (bucket, split factors); factors past the key's 10 bits (more than the
  // 2 x SMs a graph step splits into) run eagerly.
  const int sp[] = {shape.splits_single, shape.splits_multi, shape.splits_single_narrow,
                    shape.splits_multi_narrow};
  GraphKey key{shape.T, shape.n_single, shape.n_multi, shape.n_flash, 0, 0, 0, 0, shape.splits_mla};
  key[9] = hidden_key_;
  for (int i = 0; i < 4; ++i) {
    graph = graph && sp[i] > 0 && sp[i] < 1024;
    key[4 + i] = sp[i];
  }
  if (!graph) {
    launch_step(shape);
    return;
  }
  const StreamRef s = ctx_.compute();
  auto it = graphs_.find(key);
  if (it == graphs_.end())
    it = graphs_.emplace(key, GraphExec::capture(s, [&] { launch_step(shape); })).first;
  it->second.launch(s);
}

}  // namespace keel::cuda
