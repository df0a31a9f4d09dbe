// GBNF, the grammar format of llama.cpp: `name ::= alternatives` rules with "literals",
// [character classes], `.`, (groups), rule references, * + ? {m} {m,} {m,n}, and
// # comments. The document is rule `root`. Errors name the line and column.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace keel::grammar {

Grammar gbnf_grammar(std::string_view text);

}  // namespace keel::grammar
