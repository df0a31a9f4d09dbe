// libFuzzer harness: bytes -> tokenizer.json / SentencePiece / tiktoken loading, then
// encode, decode and streaming decode (see unit/text/tokenizer_fuzz_target.h).
#include "unit/text/tokenizer_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  keel::fuzz::tokenizer_one(data, size);
  return 0;
}
