// JSON Schema documents embedded in literal text: `begin`, then one of the options
// (`head` + a document of `schema` + `tail`), then `end`. This is how a forced tool call
// is constrained in the model's own markup, e.g. `<tool_call>\n` + {"name": "f",
// "arguments": <the tool's parameters>} + `\n</tool_call>`: each option's schema keeps
// its own root, so its $refs resolve as the client wrote them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace keel::grammar {

struct TaggedJson {
  struct Option {
    std::string head;
    nlohmann::ordered_json schema;
    std::string tail;
  };
  std::string begin;
  std::vector<Option> options;
  std::string end;
};

// The constraint text ({"begin", "options": [{"head", "schema", "tail"}], "end"}) and back.
std::string tagged_json_text(const TaggedJson &t);
// Throws Error(kInvalidArgument) naming `where` and the path for malformed text.
TaggedJson parse_tagged_json(std::string_view text, const std::string &where);

// Errors name `where` + ".options.<i>.schema.<path>".
Grammar tagged_json_grammar(const TaggedJson &t, const std::string &where);

}  // namespace keel::grammar
