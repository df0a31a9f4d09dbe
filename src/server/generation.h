// One API request's generation, free of wire formats: submits one engine request per
// (prompt, sample), turns token events into UTF-8-safe text deltas, applies stop
// strings (ending the engine request with stop_request when one matches), and
// accumulates results.
// Callbacks run on the engine client's thread, serialized; they must not block.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "registry/model_registry.h"
#include "server/stop_matcher.h"

namespace keel::server {

struct GenerationSpec {
  std::vector<std::vector<TokenId>> prompts;  // [num_prompts][prompt_len]
  int n = 1;                                  // samples per prompt
  SamplingParams sampling;                    // seed, if set, is offset by the sample index
  std::vector<std::string> stop;
};

struct ChoiceDelta {
  int index = 0;
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenLogprob> logprobs;          // [tokens.size()] when asked
  std::vector<std::vector<TokenLogprob>> top;  // [tokens.size()][k]
  std::optional<FinishReason> finish;          // the engine's, or kStop on a stop string
  std::string stop_sequence;
  std::string error;
  bool first = false;  // the choice's first delta (carries prompt logprobs when asked)
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top;
  int cached_prompt_tokens = 0;
  int stored_prompt_tokens = 0;  // prompt tokens this choice wrote to the prefix cache
};

struct ChoiceResult {
  int prompt_index = 0;
  std::string text;
  std::vector<TokenId> tokens;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top;
  FinishReason finish = FinishReason::kStop;  // once done
  std::string stop_sequence;
  std::string error;
  int cached_prompt_tokens = 0;
  int stored_prompt_tokens = 0;
  bool done = false;
};

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  using DeltaFn = std::function<void(const ChoiceDelta &)>;
  using DoneFn = std::function<void(const Generation &)>;

  // Submits every choice. Throws Error(kUnavailable) when the engine refuses (then
  // nothing is left running).
  static std::shared_ptr<Generation> start(ModelLease lease, GenerationSpec spec,
                                           std::atomic<std::uint64_t> &next_id, DeltaFn on_delta,
                                           DoneFn on_done);
  // Aborts every unfinished choice (a client that left). Idempotent.
  void abort();

  const std::vector<ChoiceResult> &results() const { return results_; }
  const GenerationSpec &spec() const { return spec_; }
  int prompt_tokens() const;
  int completion_tokens() const;
  int cached_tokens() const;
  // Prompt tokens written to the prefix cache (one figure per prompt, as cached_tokens).
  int stored_tokens() const;
  bool any_error(std::string *message) const;

 private:
  Generation() = default;
  void on_event(int index, const RequestEvent &e);

  ModelLease lease_;
  GenerationSpec spec_;
  DeltaFn on_delta_;
  DoneFn on_done_;
  std::mutex mu_;
  std::vector<ChoiceResult> results_;
  std::vector<RequestId> ids_;
  std::vector<std::unique_ptr<StreamingDetokenizer>> detok_;
  std::vector<StopMatcher> stops_;
  std::vector<bool> started_;
  int remaining_ = 0;
  bool aborted_ = false;
};

}  // namespace keel::server
