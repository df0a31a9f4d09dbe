// JSON Schema to grammar: the subset OpenAI's strict mode defines plus what clients
// send (enum, const, nested objects and arrays, min/maxItems, $defs/$ref, anyOf,
// string lengths, simple patterns and formats, integer and number bounds). Properties
// come in the schema's order; properties not listed are not generated. Keywords that
// restrict values in ways the grammar cannot enforce are refused, naming their path
// ("properties.price.multipleOf"); annotations (title, description, ...) are ignored.
// Numbers: minimum / maximum / exclusive* on integers (|bound| <= 1e15) and on numbers
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

struct JsonSchemaOptions {
  int max_whitespace = 20;  // whitespace run between tokens of the document; 0: compact
  int max_depth = 64;       // schema nesting refused past this
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
