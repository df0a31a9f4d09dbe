// JSON Schema to grammar: the subset OpenAI's strict mode defines plus what clients
// send (enum, const, nested objects and arrays, min/maxItems, $defs/$ref, anyOf,
// string lengths, simple patterns and formats, integer and number bounds). Properties
// come in the schema's order; keys not listed are allowed (any value, never a
// listed key's name) unless additionalProperties says otherwise. Keywords that
// restrict values in ways the grammar cannot enforce are refused, naming their path
// ("properties.price.multipleOf"); annotations (title, description, ...) are ignored.
// Numbers: minimum / maximum / exclusive* on integers (any size) and on numbers
// (plain decimals then, no exponent; grammar/number_range.h says which pairs of bounds
// are refused); multipleOf 1 (an integer) and, on numbers without bounds, 10^-n (n
// fraction digits at most); other divisors are refused. A pattern with minLength /
// maxLength is kept when every match of the pattern has a length within them (e.g.
// ^[0-9]{5}$ with maxLength 5), else refused. Refused too: not, if / then / else,
// uniqueItems: true (a grammar cannot remember the items), and the other keywords listed
// in json_schema.cpp.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace keel::grammar {

// Whitespace between the tokens of a document (docs/structured-output.md):
// kBounded: nothing, one space, or a newline and up to 40 spaces: what Python's
//   json.dumps writes with and without indent=2 (", ", ": ", ",\n  "), and never a run
//   a model can loop in until max_tokens;
// kStrict: the JSON spec's, any run of space, tab, CR and LF;
// kNone: none (compact).
// A schema's root may choose with "x-keel-whitespace": "bounded" | "strict" | "none".
enum class JsonWhitespace { kBounded, kStrict, kNone };

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kBounded;
  // Objects without additionalProperties: the spec allows any further keys (the
  // default); true generates the declared properties only (a forced tool call's
  // arguments: a tool takes the parameters it declares).
  bool declared_properties_only = false;
  int max_depth = 64;  // schema nesting refused past this
  // Prefixes error paths, e.g. "response_format.json_schema.schema".
  std::string where;
};

// Throws Error(kInvalidArgument) naming the path for an invalid or unsupported schema.
Grammar json_schema_grammar(const nlohmann::ordered_json &schema,
                            const JsonSchemaOptions &opts = {});
Grammar json_schema_grammar(std::string_view schema_text, const JsonSchemaOptions &opts = {});

// One document of `schema` as an expression of `b` ($refs resolve against `schema`), for
// grammars that embed JSON documents in other text (a forced tool call's markup).
GrammarBuilder::ExprId json_schema_expr(GrammarBuilder &b, const nlohmann::ordered_json &schema,
                                        const JsonSchemaOptions &opts = {});

}  // namespace keel::grammar
