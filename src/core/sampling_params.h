// What a request asks of sampling and stopping. Plain data; validated at the API edge.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"

namespace keel {

struct SamplingParams {
  float temperature = 1.0f;           // 0 means greedy
  int32_t top_k = 0;                  // 0: off
  float top_p = 1.0f;                 // 1: off
  float min_p = 0.0f;                 // 0: off
  float repetition_penalty = 1.0f;    // 1: off (HF semantics: divide positive logits)
  float presence_penalty = 0.0f;      // OpenAI semantics
  float frequency_penalty = 0.0f;     // OpenAI semantics
  std::optional<std::uint64_t> seed;  // same seed, same output
  int32_t max_tokens = 256;
  // Output tokens before a stop token (eos, stop_token_ids) or a stop string may end the
  // request (vLLM's min_tokens): the engine masks stop tokens' logits until then.
  int32_t min_tokens = 0;
  std::vector<TokenId> stop_token_ids;  // in addition to the model's eos unless ignore_eos
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  int32_t logprobs = -1;         // -1: none; N >= 0: the sampled token's logprob and the top N
  bool prompt_logprobs = false;  // logprobs of the prompt tokens too (echo)
  // Structured output (src/grammar/constraint.h): "json_schema", "json_object", "regex",
  // "choice" or "grammar", with its text; empty: unconstrained.
  std::string constraint_kind;
  std::string constraint_text;
  // Thinking budget (core/thinking_budget.h): after this many tokens inside the think
  // block the engine writes thinking_end and the model goes on with its answer. < 0: none.
  int32_t thinking_budget = -1;
  std::vector<TokenId> thinking_start;  // the block's opening tokens ("<think>")
  std::vector<TokenId> thinking_end;    // its closing tokens ("\n</think>\n\n")
  bool thinking_open = false;           // the prompt ends inside the block
  // Speculative decoding for this request when the engine has a drafter (false: opt out).
  bool speculative = true;

  bool greedy() const { return temperature <= 0.0f; }
};

}  // namespace keel
