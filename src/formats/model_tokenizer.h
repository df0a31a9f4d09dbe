// The tokenizer that keel make-model ships with a model: either a copy of an existing
// HF tokenizer (tokenizer.json [+ tokenizer_config.json]), or a minimal generated
// byte-level BPE one. Also its GGUF form (tokenizer.ggml.* keys).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"

namespace keel {

class GgufMetadata;

struct ModelTokenizer {
  std::string tokenizer_json;         // the text of tokenizer.json
  std::string tokenizer_config_json;  // the text of tokenizer_config.json (may be empty)
  std::int64_t size = 0;              // highest token id + 1
  std::optional<TokenId> bos;
  std::vector<TokenId> eos;  // end-of-text ids (eos first, then end-of-turn)
  bool add_bos = false;
  std::string chat_template;
  std::string source;  // for error messages

  // Replaces the chat template, in tokenizer_config.json too (written when there was none).
  void set_chat_template(const std::string &tmpl);
  // Writes tokenizer.json and tokenizer_config.json into an HF directory.
  void write_hf(const std::filesystem::path &dir) const;
  // Adds tokenizer.ggml.* (gpt2 model: tokens, token_type, merges, pre, special ids) and
  // tokenizer.chat_template, padding the token list to `vocab_size` with unused
  // [PAD<i>] tokens as llama.cpp's converter does. Throws Error(kUnsupported) for a
  // tokenizer that is not byte-level BPE.
  void add_to_gguf(GgufMetadata &meta, std::int64_t vocab_size) const;
};

// A minimal byte-level BPE tokenizer: 256 byte tokens, a few dozen English merges and
// Llama-3-style specials (<|begin_of_text|>, <|end_of_text|>, <|start_header_id|>,
// <|end_header_id|>, <|eot_id|>), with a simple chat template. Fits in `max_size` ids
// (throws Error(kInvalidArgument) when even bytes + specials do not).
ModelTokenizer generate_tokenizer(std::int64_t max_size);

// Reads a tokenizer.json file or an HF directory holding one (with its
// tokenizer_config.json when present). Throws Error naming the file.
ModelTokenizer load_tokenizer(const std::filesystem::path &path);

}  // namespace keel
