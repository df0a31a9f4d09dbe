// A grammar against what a vocabulary can write: a byte that no token contains can
// never be produced, so every path that needs one is a dead end. trim_dead_ends drops
// those byte edges and then every edge into a node (or call of a rule) from which the
// rule can no longer finish, so that each state the matcher can reach still has a way
// to the end. A grammar whose document then cannot be finished at all is refused when
// it is compiled (Error(kInvalidArgument) naming the rule and the missing bytes),
// before any token is generated.
#pragma once

#include <bitset>
#include <functional>
#include <string>

#include "grammar/grammar.h"

namespace keel::grammar {

class TokenVocab;

// Bit b set: some token's bytes contain byte b.
using ByteSet = std::bitset<256>;

// The bytes of every token a grammar may allow (special tokens excluded).
ByteSet vocab_bytes(const TokenVocab &vocab);
// The bytes of token ids [0, n) as `bytes_of` gives them.
ByteSet vocab_bytes(std::size_t n, const std::function<std::string(std::size_t)> &bytes_of);

// Removes what `bytes` cannot write and every path left without an end. Throws
// Error(kInvalidArgument) "<where>: ... needs byte(s) ... that no token of the model's
// vocabulary contains" when the document can no longer be finished.
void trim_dead_ends(Grammar &g, const ByteSet &bytes, const std::string &where = {});

}  // namespace keel::grammar
