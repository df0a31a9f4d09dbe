// One fuzz input through the tokenizer loaders and the encoder. Shared by the
// libFuzzer harness (tests/fuzz/fuzz_tokenizer_json.cpp) and the unit test that
// replays the committed corpus. keel::Error is the expected answer to bad input;
// anything else (a crash, another exception, a sanitizer report) is a bug.
//
// Input layout: byte 0 picks the loader (0: tokenizer.json, 1: SentencePiece model,
// 2: tiktoken ranks); the rest is the file, optionally followed by "\n\x01\n" and a
// text to encode (otherwise a fixed mixed-script text is encoded).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "text/incremental_decoder.h"
#include "text/tokenizer.h"

namespace keel::fuzz {

inline void tokenizer_one(const std::uint8_t *data, std::size_t size) {
  if (size == 0) return;
  const std::string_view all(reinterpret_cast<const char *>(data) + 1, size - 1);
  std::string_view
      file = all,
      text = "Hello, world! 123 \xF0\x9F\xA6\x99 \xE6\x97\xA5\xE6\x9C\xAC <s> caf\xC3\xA9\n\t x";
  if (auto sep = all.find("\n\x01\n"); sep != std::string_view::npos) {
    file = all.substr(0, sep);
    text = all.substr(sep + 3);
  }
  try {
    std::unique_ptr<Tokenizer> tok;
    switch (data[0] % 3) {
      case 0:
        tok = Tokenizer::from_json(file, "fuzz.json");
        break;
      case 1:
        tok = Tokenizer::from_spm(file, "fuzz.model");
        break;
      default:
        tok = Tokenizer::from_tiktoken(file, "cl100k_base", "fuzz.tiktoken");
        break;
    }
    for (bool special : {false, true}) {
      const auto ids = tok->encode(text, {.allow_special = special, .add_bos = special});
      (void)tok->decode(ids, special);
      IncrementalDecoder inc(*tok);
      for (TokenId id : ids) (void)inc.add(id);
      (void)inc.flush();
    }
    for (TokenId id = 0; id < 64 && static_cast<std::size_t>(id) < tok->vocab_size(); ++id) {
      (void)tok->token_bytes(id);
      (void)tok->is_special(id);
    }
  } catch (const Error &) {
  }
}

}  // namespace keel::fuzz
