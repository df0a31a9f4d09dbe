// CudaModelRunner::forward_sample: builds each row's sampling parameters and penalty
// entries on the host, stages them with the step, and samples on the device.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/k_token_mask.h"
#include "exec/sampler.h"

namespace keel::cuda {

SampleRow to_sample_row(const DeviceSampleRow &row, std::int64_t vocab, std::size_t index,
                        std::vector<PenaltyEntry> &entries) {
  const SamplingParams *p = row.params;
  if (p == nullptr || !sampling_params_in_range(*p) || !(row.u >= 0 && row.u < 1))
    throw Error(ErrorCode::kInvalidArgument,
                "sampling: row " + std::to_string(index) + ": parameter out of range");
  SampleRow r;
  r.inv_temperature = p->greedy() ? 0.0f : 1.0f / p->temperature;
  r.top_k = p->top_k;
  r.top_p = p->top_p;
  r.min_p = p->min_p;
  r.repetition_penalty = p->repetition_penalty;
  r.presence_penalty = p->presence_penalty;
  r.frequency_penalty = p->frequency_penalty;
  r.u = row.u;
  r.penalty_begin = static_cast<std::int32_t>(entries.size());
  const bool rep = p->repetition_penalty != 1.0f;
  const bool counts = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
  if (rep || counts) {
    std::unordered_map<TokenId, std::int32_t> seen;  // token -> generated count
    if (rep)
      for (TokenId t : row.prompt) seen.emplace(t, 0);
    for (TokenId t : row.generated) ++seen[t];
    for (auto [t, c] : seen)
      if (t >= 0 && t < vocab) entries.push_back({t, c});
  }
  r.penalty_count = static_cast<std::int32_t>(entries.size()) - r.penalty_begin;
  return r;
}

// Structured output: the rows' masks in one upload, applied to the logits in place (they
// are this step's scratch) before sampling.
void CudaModelRunner::stage_masks(std::span<const DeviceSampleRow> rows, int R) {
  const std::size_t W = (V_ + 31) / 32;
  auto *h = host_mask_in_.as<std::byte>();
  auto *row_mask = reinterpret_cast<std::int32_t *>(h);
  auto *words = reinterpret_cast<std::uint32_t *>(h + max_rows_ * 4);
  std::int32_t n = 0;
  for (int i = 0; i < R; ++i) {
    const std::span<const std::uint32_t> m = rows[i].mask;
    if (m.empty()) {
      row_mask[i] = -1;
      continue;
    }
    // Tokens past the caller's words (a vocabulary padded beyond the tokenizer's) are
    // not allowed.
    std::uint32_t *dst = words + n * W;
    const std::size_t k = std::min(W, m.size());
    std::memcpy(dst, m.data(), k * 4);
    std::memset(dst + k, 0, (W - k) * 4);
    row_mask[i] = n++;
  }
  if (n == 0) return;
  const StreamRef sref = ctx_.compute();
  const cudaStream_t s = sref.get("stage_masks");
  auto *d = mask_in_.as<std::byte>();
  // The row index, then the n masks in one copy (the step's one bitmask upload).
  KEEL_CUDA_CHECK(cudaMemcpyAsync(d, h, R * 4, cudaMemcpyHostToDevice, s));
  KEEL_CUDA_CHECK(
      cudaMemcpyAsync(d + max_rows_ * 4, h + max_rows_ * 4, n * W * 4, cudaMemcpyHostToDevice, s));
  launch_apply_token_masks(sref, logits_.as<float>(), R, static_cast<int>(V_),
                           reinterpret_cast<const std::uint32_t *>(d + max_rows_ * 4),
                           reinterpret_cast<const std::int32_t *>(d));
}

void CudaModelRunner::forward_sample(const ForwardBatch &batch,
                                     std::span<const DeviceSampleRow> rows, ForwardOutput &out) {
  if (!sample_scratch_.bytes())
    throw Error(ErrorCode::kUnsupported, "cuda runner: built without gpu_sampling");
  // Everything about the rows is checked before any work is enqueued.
  std::vector<SampleRow> host_rows(rows.size());
  std::vector<PenaltyEntry> entries;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    host_rows[i] = to_sample_row(rows[i], V_, i, entries);
    if (static_cast<std::int64_t>(entries.size()) > penalty_cap_)
      throw Error(ErrorCode::kInvalidArgument, "sampling: more penalised tokens than the " +
                                                   std::to_string(penalty_cap_) + " staged");
  }
  // The row count is checked before the pass is enqueued, so a mismatch writes no KV.
  std::size_t want = 0;
  for (const SequenceSlice &q : batch.seqs)
    if (q.num_tokens > 0 && q.first_logits_token() >= 0)
      want += static_cast<std::size_t>(q.num_tokens - q.first_logits_token());
  if (want != rows.size())
    throw Error(ErrorCode::kInvalidArgument, "sampling: " + std::to_string(rows.size()) +
                                                 " rows given for " + std::to_string(want) +
                                                 " logits rows");
  const int R = enqueue(batch, out.row_seq, out.row_pos, true);
  // The forward is on the device: now the caller's masks, made while it was enqueued and
  // runs, must be ready (before any staging buffer is written).
  for (const DeviceSampleRow &r : rows)
    if (r.mask_ready) (*r.mask_ready)();
  out.vocab_size = static_cast<std::int32_t>(V_);
  out.logits.clear();
  std::vector<TokenId> &tokens = out.sampled;
  std::vector<float> &logprobs = out.sampled_logprobs;
  const StreamRef s = ctx_.compute();
  tokens.resize(R);
  logprobs.resize(R);
  if (R > 0) {
    // The previous call waited for its results, so the staging buffer is free.
    auto *h = host_sample_in_.as<std::byte>();
    const std::size_t rows_bytes = R * sizeof(SampleRow);
    const std::size_t pen_at = max_rows_ * sizeof(SampleRow);
    std::memcpy(h, host_rows.data(), rows_bytes);
    std::memcpy(h + pen_at, entries.data(), entries.size() * sizeof(PenaltyEntry));
    auto *d = sample_in_.as<std::byte>();
    KEEL_CUDA_CHECK(cudaMemcpyAsync(d, h, rows_bytes, cudaMemcpyHostToDevice,
                                    s.get("cuda runner: sampling inputs")));
    if (!entries.empty())
      KEEL_CUDA_CHECK(cudaMemcpyAsync(d + pen_at, h + pen_at, entries.size() * sizeof(PenaltyEntry),
                                      cudaMemcpyHostToDevice,
                                      s.get("cuda runner: sampling inputs")));
    std::int32_t *d_tokens = sample_out_.as<std::int32_t>();
    float *d_logprobs = reinterpret_cast<float *>(d_tokens + max_rows_);
    stage_masks(rows, R);  // after the forward is enqueued: the masks were made beside it
    launch_sample(s, logits_.as<float>(), R, static_cast<int>(V_),
                  reinterpret_cast<const SampleRow *>(d),
                  reinterpret_cast<const PenaltyEntry *>(d + pen_at), sample_scratch_.data(),
                  sample_scratch_.bytes(), d_tokens, d_logprobs);
  }
  compute_done_.record(s);
  if (R > 0) {
    compute_done_.make_wait(ctx_.copy_d2h());
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_sample_out_.data(), sample_out_.data(), max_rows_ * 8,
                                    cudaMemcpyDeviceToHost,
                                    ctx_.copy_d2h().get("cudaMemcpyAsync")));
    out_copied_.record(ctx_.copy_d2h());
    out_copied_.wait(ctx_.wait_timeout(), "cuda runner: sampled tokens copy");
    const auto *ht = host_sample_out_.as<std::int32_t>();
    std::copy(ht, ht + R, tokens.begin());
    std::memcpy(logprobs.data(), ht + max_rows_, R * sizeof(float));
  } else {
    compute_done_.wait(ctx_.wait_timeout(), "cuda runner: forward");
  }
  copy_hidden(batch.total_tokens(), out.hidden);
  profiler_.collect();
}

}  // namespace keel::cuda
