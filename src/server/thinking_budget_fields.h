// Thinking budgets from the APIs' fields, enforced by the engine (core/thinking_budget.h):
// Anthropic thinking.budget_tokens (type enabled), or output_config.effort (type
// adaptive); OpenAI reasoning_effort and Responses reasoning.effort. Efforts map to
// budgets of thinking tokens: minimal 256, low 1024, medium 4096, high 16384,
// xhigh / max 32768 ("none" turns thinking off in the template instead).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/sampling_params.h"
#include "registry/model_text.h"

namespace keel::server {

// The budget of an effort name, or nullopt for none or an unknown one.
std::optional<std::int64_t> thinking_budget_for_effort(const std::string &effort);

// The budget of a chat request's template kwargs' reasoning_effort (a string), if any.
std::optional<std::int64_t> thinking_budget_of_kwargs(const nlohmann::ordered_json &kwargs);

// Sets s's thinking budget: the block opens with "<think>" and closes with
// "\n</think>\n\n" in the model's tokens; `prompt_opens` when the prompt already opened
// it. Nothing when there is no budget, or when a constraint owns the output (a forced
// tool call or structured output: the grammar decides every token there).
void set_thinking_budget(SamplingParams &s, const ModelText &text,
                         std::optional<std::int64_t> budget, bool prompt_opens);

}  // namespace keel::server
