#include "server/constraint_vocabulary.h"

#include "core/error.h"
#include "grammar/constraint.h"
#include "grammar/dead_ends.h"
#include "server/json_fields.h"

namespace keel::server {

void check_constraint_vocabulary(const SamplingParams &s, const ModelText &text) {
  if (s.constraint_kind.empty()) return;
  const auto kind = grammar::parse_constraint_kind(s.constraint_kind);
  if (!kind) return;  // the engine names an unknown kind
  // A forced tool call is a tagged_json constraint; everything else came from
  // response_format (or structured_outputs, text.format: the same field family).
  const std::string field =
      *kind == grammar::ConstraintKind::kTaggedJson ? "tool_choice" : "response_format";
  // Byte-level and byte-fallback vocabularies hold all 256 bytes in their first few
  // hundred ids, so this stops early for them.
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(text.vocab_size(), 0));
  const grammar::ByteSet bytes =
      grammar::vocab_bytes(n, [&](std::size_t i) { return text.token_text(TokenId(i)); });
  if (bytes.all()) return;
  try {
    grammar::Grammar g = grammar::compile_grammar({*kind, s.constraint_text}, field);
    grammar::trim_dead_ends(g, bytes, field);
  } catch (const Error &e) {
    std::string msg = e.what();
    if (msg.rfind(field + ": ", 0) == 0) msg = msg.substr(field.size() + 2);
    fail_field(field, msg);
  }
}

}  // namespace keel::server
