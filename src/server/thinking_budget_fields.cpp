#include "server/thinking_budget_fields.h"

#include <algorithm>

#include "server/chat_prompt.h"

namespace keel::server {

std::optional<std::int64_t> thinking_budget_for_effort(const std::string &effort) {
  if (effort == "minimal") return 256;
  if (effort == "low") return 1024;
  if (effort == "medium") return 4096;
  if (effort == "high") return 16384;
  if (effort == "xhigh" || effort == "max") return 32768;
  return std::nullopt;
}

std::optional<std::int64_t> thinking_budget_of_kwargs(const nlohmann::ordered_json &kwargs) {
  if (!kwargs.is_object()) return std::nullopt;
  auto e = kwargs.find("reasoning_effort");
  if (e == kwargs.end() || !e->is_string()) return std::nullopt;
  return thinking_budget_for_effort(e->get<std::string>());
}

void set_thinking_budget(SamplingParams &s, const ModelText &text,
                         std::optional<std::int64_t> budget, bool prompt_opens) {
  if (!budget || !s.constraint_kind.empty()) return;
  s.thinking_budget = static_cast<std::int32_t>(std::clamp<std::int64_t>(*budget, 0, 1 << 30));
  if (tool_call_format_of(text) == ToolCallFormat::kHarmony) {
    // Harmony: the analysis message, closed and followed by the final one's header.
    s.thinking_start = text.encode("<|channel|>analysis<|message|>", false);
    s.thinking_end = text.encode("<|end|><|start|>assistant<|channel|>final<|message|>", false);
  } else {
    s.thinking_start = text.encode("<think>", false);
    s.thinking_end = text.encode("\n</think>\n\n", false);
  }
  s.thinking_open = prompt_opens;
}

}  // namespace keel::server
