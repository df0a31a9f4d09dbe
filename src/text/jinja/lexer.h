// Splits a Jinja2 template into text and tag tokens, applying the whitespace rules of
// the environment HF uses (trim_blocks, lstrip_blocks, `-`/`+` modifiers) and
// jinja2's newline normalisation (every line break becomes \n; one trailing newline
// is dropped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace keel::jinja {

enum class TokenKind {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;  // text data, name, operator, or the decoded string literal
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
  int column = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws keel::Error(kInvalidArgument) naming the line for malformed input.
std::vector<Token> lex(std::string_view source, const LexOptions &options = {});

}  // namespace keel::jinja
