// gpt-oss's harmony chat format, rendered from chat messages, for models that ship no
// chat template of their own (keel make-model --arch gpt_oss, a bare o200k_harmony
// tokenizer). Checkpoints with chat_template.jinja render through it instead.
//
//   <|start|>system<|message|>IDENTITY\nKnowledge cutoff: 2024-06\nCurrent date: DATE\n\n
//     Reasoning: EFFORT\n\n# Valid channels: analysis, commentary, final. Channel must be
//     included for every message.[\nCalls to these tools must go to the commentary
//     channel: 'functions'.]<|end|>
//   <|start|>developer<|message|># Instructions\n\nSYSTEM TEXT[\n\n# Tools\n\n## functions\n\n
//     namespace functions {\n\n// DESCRIPTION\ntype NAME = (_: {\n// PROP DESCRIPTION\n
//     prop?: string,\n}) => any;\n\n} // namespace functions]<|end|>
//   <|start|>user<|message|>TEXT<|end|>
//   <|start|>assistant<|channel|>analysis<|message|>THOUGHT<|end|>   (only in the turn in
//     progress: reasoning of turns that ended in a final answer is dropped)
//   <|start|>assistant<|channel|>commentary to=functions.NAME
//   <|constrain|>json<|message|>ARGS<|call|>
//   <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>RESULT<|end|>
//   <|start|>assistant<|channel|>final<|message|>ANSWER<|end|>
//   <|start|>assistant                                                (generation prompt)
// The system and developer roles of the APIs both become the developer message's
// instructions (harmony's system message is the format's own).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace keel {

// messages and tools as for text/tool_prompt.h (OpenAI-shaped; assistant
// reasoning_content is the analysis text). kwargs: the request's template variables:
// reasoning_effort ("low", "medium" (the default), "high"; minimal -> low, xhigh and max
// -> high, none -> low), current_date ("YYYY-MM-DD", default today in UTC),
// knowledge_cutoff, model_identity.
std::string render_harmony_prompt(const nlohmann::ordered_json &messages,
                                  const nlohmann::ordered_json &tools, bool add_generation_prompt,
                                  const nlohmann::ordered_json &kwargs);

// A JSON Schema as harmony's TypeScript-like type ("string", "\"a\" | \"b\"", "number[]",
// "{\n...\n}"); exposed for tests.
std::string harmony_type_of(const nlohmann::ordered_json &schema, int indent);

}  // namespace keel
