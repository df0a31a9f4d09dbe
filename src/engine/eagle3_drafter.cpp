#include "engine/eagle3_drafter.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "exec/cpu/cpu_model_runner.h"

namespace keel {

std::unique_ptr<Eagle3Drafter> Eagle3Drafter::open(const std::filesystem::path &path,
                                                   ModelRunner &target, ExecContext *ctx) {
  const std::string flag = "--speculative eagle3:" + path.string();
  auto *cpu_runner = dynamic_cast<cpu::CpuModelRunner *>(&target);
  if (ctx == nullptr || cpu_runner == nullptr)
    throw Error(ErrorCode::kUnsupported,
                flag + ": " + arch_name(target.config().arch) +
                    ": an EAGLE-3 head runs beside the CPU runner only (the CUDA and "
                    "tensor-parallel runners cannot hand it the target's hidden states yet)");
  if (target.config().kv_layout == KvLayout::kLatent)
    throw Error(ErrorCode::kUnsupported,
                flag + ": " + arch_name(target.config().arch) +
                    ": multi-head latent attention targets do not return their layers' hidden "
                    "states yet");
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec))
    throw Error(ErrorCode::kNotFound, flag + ": not a directory (config.json and safetensors)");
  std::unique_ptr<arch::Eagle3Head> head;
  try {
    head = std::make_unique<arch::Eagle3Head>(path, target.config(), cpu_runner->model().embed());
  } catch (const Error &e) {
    throw Error(e.code(), flag + ": " + e.what());
  }
  auto d = std::make_unique<Eagle3Drafter>(std::move(head), *ctx);
  std::string layers;
  for (const std::int32_t l : d->head_->aux_layers())
    layers += (layers.empty() ? "" : ",") + std::to_string(l);
  std::fprintf(stderr,
               "keel engine: EAGLE-3 head %s: %.1f MiB of weights, draft vocabulary %lld, "
               "target layers %s\n",
               path.string().c_str(), static_cast<double>(d->weights_bytes()) / (1 << 20),
               static_cast<long long>(d->head_->config().draft_vocab_size), layers.c_str());
  return d;
}

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<arch::Eagle3Head> head, ExecContext &ctx)
    : head_(std::move(head)), ctx_(ctx), width_(head_->aux_width()) {}

std::int64_t Eagle3Drafter::kv_bytes() const {
  std::int64_t bytes = 0;
  for (const auto &[id, s] : state_)
    bytes += static_cast<std::int64_t>(s.cache.rows.capacity() * sizeof(float));
  return bytes;
}

std::int32_t Eagle3Drafter::pending_rows(RequestId id) const {
  auto it = state_.find(id);
  return it == state_.end() ? 0 : it->second.pending_rows;
}

std::int32_t Eagle3Drafter::cached_positions(RequestId id) const {
  auto it = state_.find(id);
  return it == state_.end() ? 0 : it->second.cache.length;
}

void Eagle3Drafter::observe_hidden(RequestId id, std::span<const TokenId> tokens,
                                   std::int32_t start_pos, std::int32_t n,
                                   std::span<const float> rows) {
  if (static_cast<std::int64_t>(rows.size()) != static_cast<std::int64_t>(n) * width_) return;
  State &s = state_[id];
  const std::int32_t base = s.cache.length;
  for (std::int32_t j = 0; j < n; ++j) {
    const std::int32_t at = start_pos + j - base;  // row index in `pending`
    if (at < 0) continue;        // consumed already (a preempted request computes it again)
    if (at >= s.pending_rows) {  // zero rows for positions never computed (see the header)
      s.pending_rows = at + 1;
      s.pending.resize(static_cast<std::size_t>(s.pending_rows * width_), 0.0f);
    }
    std::copy(rows.begin() + j * width_, rows.begin() + (j + 1) * width_,
              s.pending.begin() + at * width_);
  }
  advance(s, tokens, static_cast<std::int32_t>(tokens.size()) - 1, false);
}

bool Eagle3Drafter::advance(State &s, std::span<const TokenId> tokens, std::int32_t end,
                            bool head) {
  const std::int32_t start = s.cache.length, rows = std::min(end - start, s.pending_rows);
  if (rows <= 0) return false;
  MtpInput in;
  in.start_pos = start;
  in.hidden = std::span<const float>(s.pending.data(), static_cast<std::size_t>(rows * width_));
  in.tokens = tokens.subspan(static_cast<std::size_t>(start + 1), static_cast<std::size_t>(rows));
  in.head = head ? MtpInput::Head::kLast : MtpInput::Head::kNone;
  head_->forward(s.cache, in, out_, ctx_);
  s.pending.erase(s.pending.begin(), s.pending.begin() + rows * width_);
  s.pending_rows -= rows;
  return true;
}

void Eagle3Drafter::propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
                            std::vector<TokenId> &out) {
  auto it = state_.find(id);
  if (it == state_.end() || max_tokens <= 0) return;
  State &s = it->second;
  const auto n = static_cast<std::int32_t>(tokens.size());
  // Position n - 2 (the target's rows from the last step, x_{n-1} just sampled) must be the
  // last one left; its head row guesses x_n.
  if (s.cache.length + s.pending_rows < n - 1 || !advance(s, tokens, n - 1, true) ||
      s.cache.length != n - 1)
    return;
  // Rows past n - 2 were the target's over drafts it may have rejected: computed again.
  s.pending.clear();
  s.pending_rows = 0;
  const std::int32_t kept = s.cache.length;
  const std::int64_t H = head_->hidden_size();
  std::vector<float> h(out_.hidden.end() - H, out_.hidden.end());
  TokenId guess = out_.argmax.back();
  out.push_back(guess);
  for (std::int32_t i = 1; i < max_tokens; ++i) {
    MtpInput chain;
    chain.start_pos = s.cache.length;
    chain.hidden = h;
    chain.chained = true;
    chain.tokens = std::span<const TokenId>(&guess, 1);
    head_->forward(s.cache, chain, out_, ctx_);
    h.assign(out_.hidden.begin(), out_.hidden.end());
    guess = out_.argmax.back();
    out.push_back(guess);
  }
  s.cache.length = kept;  // chained positions fed on guesses: dropped
  s.cache.rows.resize(static_cast<std::size_t>(kept * head_->cache_row_floats()));
}

}  // namespace keel
