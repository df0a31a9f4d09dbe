// libFuzzer harness: bytes -> the hf_config parser.
#include "fuzz/format_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  keel::fuzz::hf_config_one(data, size);
  return 0;
}
