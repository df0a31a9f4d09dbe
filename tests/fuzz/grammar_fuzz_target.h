// One fuzz input for the grammar engine: a JSON Schema text compiled (bounded time and
// memory, or keel::Error), then, when it compiles, the input's own bytes fed to its
// matcher (never a crash whatever the bytes). Shared by the libFuzzer harness and the
// unit test that replays the committed corpus (tests/fuzz/corpus/json_schema).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"

namespace keel::fuzz {

inline void json_schema_one(const std::uint8_t *data, std::size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  std::shared_ptr<const grammar::CompiledGrammar> g;
  try {
    g = std::make_shared<const grammar::CompiledGrammar>(
        grammar::compile_grammar({grammar::ConstraintKind::kJsonSchema, text}), nullptr);
  } catch (const Error &) {
    return;
  }
  grammar::GrammarMatcher m(g);
  for (char c : text) (void)m.accept_bytes(std::string_view(&c, 1));
}

}  // namespace keel::fuzz
