// libFuzzer harness: bytes -> a request body as the server parses it (parse_body: UTF-8,
// then JSON under request_json_limits()) -> each API's request parser (chat, completions,
// Anthropic messages and count_tokens, Responses). A refusal must be an ApiErrorException
// or keel::Error (a 4xx / named error); anything else escaping is a finding, and so is a
// crash or a stack overflow (deep nesting: tests/fuzz/corpus/request/deep_*.json).
//   build-fuzz/tests/fuzz/fuzz_request tests/fuzz/corpus/request -max_total_time=300
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/anthropic/anthropic_types.h"
#include "server/json_fields.h"
#include "server/openai/openai_types.h"
#include "server/openai/responses_types.h"

namespace {

template <typename Fn>
void expect_named_errors(const char *what, Fn fn) {
  try {
    fn();
  } catch (const keel::server::ApiErrorException &) {
  } catch (const keel::Error &) {
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: unexpected exception: %s\n", what, e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace keel::server;
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  nlohmann::ordered_json body;
  try {
    body = parse_body(text);
  } catch (const ApiErrorException &) {
    return 0;
  }
  // What the server does with a parsed body recurses over it: bounded by the limits.
  (void)body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  const nlohmann::ordered_json copy = body;
  expect_named_errors("parse_chat", [&] { (void)openai::parse_chat(copy); });
  expect_named_errors("parse_completion", [&] { (void)openai::parse_completion(body); });
  expect_named_errors("parse_messages", [&] { (void)anthropic::parse_messages(body); });
  expect_named_errors("count_tokens", [&] { (void)anthropic::parse_messages(body, true); });
  expect_named_errors("parse_responses", [&] {
    (void)openai::parse_responses(
        body, [](const std::string &) { return std::optional<nlohmann::ordered_json>(); },
        [](const std::string &) { return std::optional<nlohmann::ordered_json>(); });
  });
  return 0;
}
