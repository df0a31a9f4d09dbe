// libFuzzer harness: bytes -> JSON Schema compile -> matcher.
#include "fuzz/grammar_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  keel::fuzz::json_schema_one(data, size);
  return 0;
}
