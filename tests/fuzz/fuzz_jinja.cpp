// libFuzzer harness for the Jinja2 interpreter: the input is a template source, parsed
// and rendered over a small chat conversation under tight limits. Any keel::Error is
// fine; a crash, hang, sanitizer report or other exception is a bug.
// tests/unit/jinja/fuzz_corpus_test.cpp replays tests/fuzz/corpus/jinja/ through
// keel_fuzz_jinja_one() in the normal test run.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "text/jinja/json_value.h"
#include "text/jinja/template.h"

inline int keel_fuzz_jinja_one(const std::uint8_t *data, std::size_t size) {
  static const keel::jinja::Value context =
      keel::jinja::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": " hi <b> "},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, true]}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "ok"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]}}}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "documents": null
  })"));
  keel::jinja::RenderOptions options;
  options.limits.max_steps = 200000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_call_depth = 64;
  std::tm tm{};
  tm.tm_year = 124;
  options.now = tm;
  try {
    keel::jinja::Template tpl(std::string_view(reinterpret_cast<const char *>(data), size));
    tpl.render(context, options);
  } catch (const keel::Error &) {
    // Rejected input: what it should do.
  }
  return 0;
}

#ifndef KEEL_FUZZ_NO_MAIN
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  return keel_fuzz_jinja_one(data, size);
}
#endif
