// libFuzzer harness: bytes -> the safetensors parser.
#include "fuzz/format_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  keel::fuzz::safetensors_one(data, size);
  return 0;
}
