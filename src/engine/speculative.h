// Speculative decoding (issue 30; docs/ARCHITECTURE.md, "The verify shape"): a drafter
// proposes the tokens it expects to follow a sequence; the engine computes them in the
// sequence's next decode step (one forward over 1 + k positions, SequenceSlice::kTail),
// samples every row from the target's logits exactly as it would without drafts, and
// keeps the drafts up to the first one the target did not choose, plus the target's own
// next token. Drafts are deterministic (a lookup, or a draft model's argmax), so "sample
// the target, accept while it equals the draft" is rejection sampling with a one-hot
// proposal: the output distribution is the target's at any temperature, and greedy
// output is token-for-token the same.
//
// The policy drafts only while it pays: not for a batch of max_running sequences or
// more (the step is then compute-bound, and a verify costs its full width), and not for
// a request whose recent drafts were mostly rejected (AcceptanceTracker backs off).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/ids.h"

namespace keel {

class Drafter;
class ModelRunner;

struct SpeculativeConfig {
  // "" (off), "ngram" (prompt lookup), "mtp" (the checkpoint's multi-token-prediction
  // layer, engine/mtp_drafter.h), "draft:PATH" (a smaller model sharing the target's
  // tokenizer, engine/draft_model_drafter.h), "eagle3:PATH" (an EAGLE-3 head,
  // engine/eagle3_drafter.h); parse_speculative_method checks a name.
  std::string method;
  std::int32_t num_speculative_tokens = 4;  // drafts per step at most
  // Adaptive: no drafts while this many sequences or more are running (0: no limit).
  std::int32_t max_running = 4;
  // Adaptive: drafts only where decoding with them was measured faster a token than
  // without, per batch size (engine/speculation_governor.h). Off: whenever allowed.
  bool adaptive = true;
  // N-gram lookup: the longest and shortest suffix of the sequence to look up.
  std::int32_t ngram_max = 4, ngram_min = 2;
  // Draft model: KV blocks of its own pool (0: as many as the target's).
  std::int32_t draft_kv_blocks = 0;
  // Makes the drafter instead of `method` when set (tests; drafters built outside).
  std::function<std::unique_ptr<Drafter>()> make_drafter;
  bool enabled() const { return (!method.empty() || make_drafter) && num_speculative_tokens > 0; }
};

// Throws Error(kInvalidArgument) naming the value unless `method` is "", "off", "ngram",
// "mtp", "draft:PATH" or "eagle3:PATH" with an existing PATH; returns the canonical name
// ("" for off; "draft:" / "eagle3:" with PATH made absolute, so an engine started
// elsewhere finds it).
std::string parse_speculative_method(const std::string &method);
// The model a "draft:PATH" method names; none for any other method.
std::optional<std::filesystem::path> draft_model_path(const std::string &method);
// The head an "eagle3:PATH" method names; none for any other method.
std::optional<std::filesystem::path> eagle3_head_path(const std::string &method);
// One interface for every way of drafting (engine thread only).
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char *name() const = 0;
  // Appends to `out` up to `max_tokens` tokens expected to follow `tokens` (the
  // request's prompt and output so far); none when it has no guess.
  virtual void propose(RequestId id, std::span<const TokenId> tokens, std::int32_t max_tokens,
                       std::vector<TokenId> &out) = 0;
  // The request ended: drop what is kept for it.
  virtual void forget(RequestId) {}
  // Memory the drafter holds beside the target's (a draft model's weights and KV pool).
  virtual std::int64_t weights_bytes() const { return 0; }
  virtual std::int64_t kv_bytes() const { return 0; }
  // Drafters that read the target's hidden states (MTP heads) say so; the engine then
  // asks the runner for every token's (ForwardBatch::want_hidden) and hands each
  // sequence's rows here after the forward: positions [start_pos, start_pos + n),
  // [n, hidden_size] values (or [n, hidden_size x hidden_layers().size()]: the outputs of
  // the target layers hidden_layers() names, concatenated; EAGLE-3), drafted positions included
  // (rejected ones are computed again, and their rows given again, before a draft may read them);
  // `tokens` are the request's tokens known so far (this step's sampled one not yet among them).
  virtual bool wants_hidden() const { return false; }
  // With wants_hidden: the target layers whose outputs a row concatenates
  // (ForwardBatch::hidden_layers); empty: the final hidden state.
  virtual std::vector<std::int32_t> hidden_layers() const { return {}; }
  virtual void observe_hidden(RequestId, std::span<const TokenId> /*tokens*/,
                              std::int32_t /*start_pos*/, std::int32_t /*n*/,
                              std::span<const float> /*rows*/) {}
};

// The drafter `config` names, or null when speculation is off. "mtp" needs `runner`,
// whose MTP layer it loads (ModelRunner::load_mtp's errors, prefixed with the flag).
// "draft:PATH" opens the draft model beside `runner` (ModelRunner::open_sibling: CPU or
// CUDA); "eagle3:PATH" the head on `runner`'s device (ModelRunner::open_eagle3_head: CPU
// or CUDA; errors name the flag and the path).
std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig &config,
                                      ModelRunner *runner = nullptr);

// One request's recent acceptance: drafting pauses, for a doubling number of steps,
// while fewer than a quarter of its drafts are accepted.
class AcceptanceTracker {
 public:
  // Whether to draft this step (a pause counts down here).
  bool should_draft();
  void record(std::int32_t drafted, std::int32_t accepted);
  double rate() const { return ema_; }

 private:
  double ema_ = 1.0;
  std::int32_t pause_ = 0, backoff_ = 0;
};

}  // namespace keel
