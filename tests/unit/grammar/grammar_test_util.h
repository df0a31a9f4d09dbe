// Helpers for the grammar tests: whole-document matching without a vocabulary.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"

namespace keel::grammar::test {

inline std::shared_ptr<const CompiledGrammar> bytes_only(Grammar g) {
  return std::make_shared<const CompiledGrammar>(std::move(g), nullptr);
}

// True when `doc` is a complete document of `g`.
inline bool matches(const std::shared_ptr<const CompiledGrammar> &g, std::string_view doc) {
  GrammarMatcher m(g);
  return m.accept_bytes(doc) && m.is_complete();
}

// True when `doc` is a prefix of some document of `g`.
inline bool prefix_ok(const std::shared_ptr<const CompiledGrammar> &g, std::string_view doc) {
  GrammarMatcher m(g);
  return m.accept_bytes(doc);
}

inline std::shared_ptr<const CompiledGrammar> compile(ConstraintKind kind, std::string_view text) {
  return bytes_only(compile_grammar({kind, std::string(text)}));
}

// The message of the kInvalidArgument error compiling `text` throws ("" if none).
inline std::string compile_error(ConstraintKind kind, std::string_view text,
                                 const std::string &where = {}) {
  try {
    compile_grammar({kind, std::string(text)}, where);
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

}  // namespace keel::grammar::test
