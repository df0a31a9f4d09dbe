// Text <-> token ids for every tokenizer format keel reads: HF tokenizer.json
// (byte-level BPE, BPE with byte fallback, unigram, WordPiece), SentencePiece .model
// files, GGUF-embedded vocabularies and tiktoken rank files.
//
// Encoding: invalid UTF-8 in the input is replaced by U+FFFD (one per maximal
// invalid subsequence) before anything else runs; added tokens are cut out of the
// text (special ones only when the caller allows them), then each piece of text is
// normalized, pre-tokenized and encoded by the model. Decoding produces valid UTF-8:
// byte sequences that do not form characters become U+FFFD.
//
// A Tokenizer is immutable after load and safe to use from several threads.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "text/tokenizer_parts.h"

namespace keel {

struct EncodeOptions {
  // Cut special tokens (e.g. "<|im_start|>") out of the text. Off for untrusted text
  // such as user messages, so that a user cannot inject control tokens.
  bool allow_special = false;
  // Apply the tokenizer's post-processor: the BOS (and, for some tokenizers, EOS)
  // that its tokenizer.json template, tokenizer_config add_bos_token or GGUF
  // add_bos_token ask for.
  bool add_bos = false;
};

class Tokenizer {
 public:
  // An HF model directory (tokenizer.json, else tokenizer.model), a tokenizer.json,
  // a SentencePiece .model, a .gguf or a .tiktoken file. Errors name the file.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path &path);
  // Parsers on bytes in memory (tests, fuzzing); `origin` names the source in errors.
  static std::unique_ptr<Tokenizer> from_json(std::string_view json, const std::string &origin);
  static std::unique_ptr<Tokenizer> from_spm(std::string_view bytes, const std::string &origin);
  static std::unique_ptr<Tokenizer> from_tiktoken(std::string_view text, std::string_view name,
                                                  const std::string &origin);

  explicit Tokenizer(text::TokenizerParts parts);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions &opts = {}) const;
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The bytes a token stands for when decoded on its own (no leading-space
  // stripping); may be a partial UTF-8 character for byte tokens.
  const std::string &token_bytes(TokenId id) const;
  // The token's string as the vocabulary spells it ("Ġhello", "▁the", "<0x0A>").
  const std::string &token_text(TokenId id) const;
  std::optional<TokenId> token_to_id(std::string_view text) const;

  std::size_t vocab_size() const { return parts_.pieces.size(); }
  std::optional<TokenId> bos() const { return parts_.bos; }
  const std::vector<TokenId> &eos_ids() const { return parts_.eos; }
  bool is_special(TokenId id) const;
  const text::TokenizerParts &parts() const { return parts_; }

 private:
  void encode_text(std::string_view text, bool at_start, std::vector<TokenId> &out) const;

  text::TokenizerParts parts_;
  std::vector<std::string> bytes_;  // token_bytes of each id
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TokenId, Hash, std::equal_to<>> piece_index_;
};

}  // namespace keel
