#include "engine/draft_model_drafter.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "engine/weight_prefetch.h"

namespace keel {

namespace {

// Positions one draft forward computes at most: a long prompt's first draft runs in
// chunks, as the target's prefill does, so the workspace stays bounded.
constexpr std::int32_t kMaxChunk = 512;

std::int64_t files_bytes(const std::filesystem::path &path) {
  std::int64_t bytes = 0;
  for (const auto &f : weight_files_of(path)) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(f, ec);
    if (!ec) bytes += static_cast<std::int64_t>(n);
  }
  return bytes;
}

}  // namespace

std::unique_ptr<DraftModelDrafter> DraftModelDrafter::open(const std::filesystem::path &path,
                                                           ModelRunner &target,
                                                           std::int32_t num_blocks) {
  const std::string flag = "--speculative draft:" + path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(ErrorCode::kNotFound, flag + ": no such file or directory");
  std::unique_ptr<ModelRunner> runner;
  try {
    runner = target.open_sibling(path, num_blocks);
  } catch (const Error &e) {
    throw Error(e.code(), flag + ": " + e.what());
  }
  const std::int64_t want = target.config().vocab_size, have = runner->config().vocab_size;
  if (have != want)
    throw Error(ErrorCode::kInvalidArgument,
                flag + ": the draft model's vocabulary has " + std::to_string(have) +
                    " tokens, the target's " + std::to_string(want) +
                    ": a draft model must share the target's tokenizer");
  auto d = std::make_unique<DraftModelDrafter>(std::move(runner), files_bytes(path));
  std::fprintf(stderr,
               "keel engine: draft model %s (%s): %.1f MiB of weights, %.1f MiB of KV "
               "(%d blocks of %d tokens)\n",
               path.string().c_str(), arch_name(d->runner_->config().arch),
               static_cast<double>(d->weights_bytes()) / (1 << 20),
               static_cast<double>(d->kv_bytes()) / (1 << 20), d->pool_.num_blocks(),
               d->block_size_);
  return d;
}

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<ModelRunner> runner,
                                     std::int64_t weights_bytes)
    : runner_(std::move(runner)),
      weights_bytes_(weights_bytes),
      block_size_(runner_->kv().block_size()),
      pool_(runner_->kv().num_blocks()) {
  greedy_.temperature = 0.0f;
}

std::int64_t DraftModelDrafter::kv_bytes() const {
  KvBlockStore &kv = runner_->kv();
  return static_cast<std::int64_t>(kv.block_bytes()) * kv.num_blocks();
}

std::vector<TokenId> DraftModelDrafter::held_tokens(RequestId id) const {
  auto it = state_.find(id);
  return it == state_.end() ? std::vector<TokenId>{} : it->second.tokens;
}

void DraftModelDrafter::shrink(State &s, std::size_t n) {
  while (s.blocks.size() > n) {
    pool_.release(s.blocks.back());
    s.blocks.pop_back();
  }
}

void DraftModelDrafter::forget(RequestId id) {
  auto it = state_.find(id);
  if (it == state_.end()) return;
  shrink(it->second, 0);
  state_.erase(it);
}

void DraftModelDrafter::propose(RequestId id, std::span<const TokenId> tokens,
                                std::int32_t max_tokens, std::vector<TokenId> &out) {
  if (max_tokens <= 0 || tokens.empty()) return;
  const std::size_t before = out.size();
  try {
    draft(state_[id], tokens, max_tokens, out);
  } catch (const std::exception &e) {
    // Drafts are only a guess: the request goes on without them, from a clean state.
    std::fprintf(stderr, "keel engine: draft model: request %llu: %s\n",
                 static_cast<unsigned long long>(id.value), e.what());
    out.resize(before);
    forget(id);
  }
}

void DraftModelDrafter::draft(State &s, std::span<const TokenId> tokens, std::int32_t max_tokens,
                              std::vector<TokenId> &out) {
  const auto n = static_cast<std::int32_t>(tokens.size());
  // Keep what the KV shares with the request (rejected drafts are cut off), and at least
  // one token to compute: the last one's logits give the first draft.
  const auto shared = static_cast<std::int32_t>(
      std::mismatch(s.tokens.begin(), s.tokens.end(), tokens.begin(), tokens.end()).first -
      s.tokens.begin());
  const std::int32_t keep = std::min(shared, n - 1);
  s.tokens.resize(keep);
  shrink(s, (keep + block_size_ - 1) / block_size_);
  // Positions written: the new tokens and every draft but the last.
  const std::int32_t need = (n + max_tokens - 1 + block_size_ - 1) / block_size_;
  if (need > static_cast<std::int32_t>(s.blocks.size()) &&
      !pool_.allocate(need - static_cast<std::int32_t>(s.blocks.size()), s.blocks))
    return;  // the pool is full: no drafts this time
  TokenId next = run(s, tokens.subspan(keep), keep);
  s.tokens.assign(tokens.begin(), tokens.end());
  out.push_back(next);
  for (std::int32_t i = 1; i < max_tokens; ++i) {
    const TokenId fed = next;
    next = run(s, std::span<const TokenId>(&fed, 1), static_cast<std::int32_t>(s.tokens.size()));
    s.tokens.push_back(fed);
    out.push_back(next);
  }
}

TokenId DraftModelDrafter::run(const State &s, std::span<const TokenId> tokens,
                               std::int32_t start) {
  const bool in_head = runner_->samples_on_device() && runner_->samples_row_on_device(greedy_);
  for (std::size_t done = 0; done < tokens.size();) {
    const auto len = static_cast<std::int32_t>(
        std::min<std::size_t>(tokens.size() - done, static_cast<std::size_t>(kMaxChunk)));
    const bool last = done + len == tokens.size();
    batch_.tokens.assign(tokens.begin() + done, tokens.begin() + done + len);
    SequenceSlice slice;
    slice.num_tokens = len;
    slice.start_pos = start + static_cast<std::int32_t>(done);
    slice.num_blocks = (slice.start_pos + len + block_size_ - 1) / block_size_;
    slice.logits = last ? SequenceSlice::Logits::kLast : SequenceSlice::Logits::kNone;
    batch_.seqs.assign(1, slice);
    batch_.block_table.clear();
    for (std::int32_t b = 0; b < slice.num_blocks; ++b)
      batch_.block_table.push_back(s.blocks[b].value);
    if (last && in_head) {
      DeviceSampleRow row;
      row.params = &greedy_;
      runner_->forward_sample(batch_, std::span<const DeviceSampleRow>(&row, 1), out_);
      return out_.sampled.at(0);
    }
    runner_->forward(batch_, out_);
    done += len;
  }
  // The last chunk's one row, where the runner cannot take the argmax in its head.
  const auto row = std::span<const float>(out_.logits).last(out_.vocab_size);
  return static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace keel
