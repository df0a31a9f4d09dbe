// Regular expressions (the JavaScript / Python subset that schemas and users write)
// as grammar expressions matching the whole text. Lookaround, backreferences, word
// boundaries and Unicode properties are refused with an error naming the position.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace keel::grammar {

// The lengths, in characters, of the texts a pattern matches; max -1: unbounded.
struct RegexLengths {
  std::int64_t min = 0, max = 0;
};

// Appends `pattern` to `b`. A leading ^ and a trailing $ are accepted and implied.
// Errors are kInvalidArgument, prefixed by `where` (e.g. "properties.zip.pattern").
// With `json_string`, the text is matched as the inside of a JSON string literal:
// '"', '\\' and control characters in the pattern become their JSON escapes.
// `lengths`, when given, receives the match lengths (a JSON escape counts as one).
GrammarBuilder::ExprId compile_regex(GrammarBuilder &b, std::string_view pattern,
                                     const std::string &where, bool json_string = false,
                                     RegexLengths *lengths = nullptr);

// A grammar whose documents are the full matches of `pattern`.
Grammar regex_grammar(std::string_view pattern, const std::string &where = "regex");

}  // namespace keel::grammar
