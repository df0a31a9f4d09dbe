// The stages a tokenizer is made of. Loaders (tokenizer.json, SentencePiece, GGUF,
// tiktoken) fill one of these; Tokenizer runs it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "text/added_tokens.h"
#include "text/decoder.h"
#include "text/model.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace keel::text {

struct TokenizerParts {
  std::string origin;               // file the tokenizer came from, for errors
  std::vector<std::string> pieces;  // id -> vocabulary string
  std::vector<char> special;        // id -> special (skipped by skip_special decode)
  std::unique_ptr<Model> model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  AddedTokenMatcher added;
  std::vector<TokenId> prefix;  // post-processor: before the text (BOS)
  std::vector<TokenId> suffix;  // ... and after it
  std::optional<TokenId> bos;
  std::vector<TokenId> eos;
};

}  // namespace keel::text
