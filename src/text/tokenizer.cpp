#include "text/tokenizer.h"

#include "core/error.h"
#include "text/utf8.h"

namespace keel {

Tokenizer::Tokenizer(text::TokenizerParts parts) : parts_(std::move(parts)) {
  if (!parts_.model) throw Error(ErrorCode::kFormat, parts_.origin + ": no tokenizer model");
  parts_.special.resize(parts_.pieces.size(), 0);
  bytes_.resize(parts_.pieces.size());
  for (std::size_t id = 0; id < parts_.pieces.size(); ++id) {
    // A token's bytes: the decoder chain on the token alone, minus the leading-space
    // stripping that only applies to the first token of a text: decode it after a
    // neutral token and cut that off.
    bytes_[id] = parts_.decoder.decode({parts_.pieces[id]});
  }
  // Decoders that drop the first token's leading space (SentencePiece) would lose
  // it here: decode such tokens after a neutral piece instead.
  const std::string probe = parts_.decoder.decode({"a", std::string("\xE2\x96\x81") + "b"});
  const bool strips_first = probe == "a b";
  for (std::size_t id = 0; id < parts_.pieces.size(); ++id) {
    const std::string &p = parts_.pieces[id];
    piece_index_.emplace(p, static_cast<TokenId>(id));
    unsigned char byte;
    if (text::parse_byte_token(p, byte) && bytes_[id] == text::kReplacementChar) {
      bytes_[id] = std::string(1, static_cast<char>(byte));  // a byte-fallback token
    } else if (strips_first && (p.starts_with("\xE2\x96\x81") || p.starts_with(" "))) {
      std::string two = parts_.decoder.decode({"a", p});
      if (two.starts_with("a")) bytes_[id] = two.substr(1);
    }
  }
}

const std::string &Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= bytes_.size())
    throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " out of range");
  return bytes_[id];
}

const std::string &Tokenizer::token_text(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= parts_.pieces.size())
    throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " out of range");
  return parts_.pieces[id];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view text) const {
  for (const auto &t : parts_.added.tokens())
    if (t.content == text) return t.id;
  auto it = piece_index_.find(text);
  if (it == piece_index_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < parts_.special.size() && parts_.special[id];
}

void Tokenizer::encode_text(std::string_view text, bool at_start, std::vector<TokenId> &out) const {
  if (text.empty()) return;
  auto sink = [&](std::string_view word) { parts_.model->encode_word(word, out); };
  if (parts_.normalizer.empty()) {
    if (parts_.pre_tokenizer.empty())
      sink(text);
    else
      parts_.pre_tokenizer.split(text, at_start, sink);
    return;
  }
  const std::string norm = parts_.normalizer.apply(text);
  if (norm.empty()) return;
  if (parts_.pre_tokenizer.empty())
    sink(norm);
  else
    parts_.pre_tokenizer.split(norm, at_start, sink);
}

std::vector<TokenId> Tokenizer::encode(std::string_view input, const EncodeOptions &opts) const {
  std::string sanitized;
  if (!text::utf8_valid(input)) {
    sanitized = text::utf8_sanitize(input);
    input = sanitized;
  }
  std::vector<TokenId> out;
  out.reserve(input.size() / 3 + 4);
  if (opts.add_bos) out.insert(out.end(), parts_.prefix.begin(), parts_.prefix.end());
  if (parts_.added.empty()) {
    encode_text(input, true, out);
  } else {
    std::vector<text::TextSegment> segs;
    parts_.added.split(input, opts.allow_special, segs);
    for (const auto &s : segs) {
      if (s.token >= 0)
        out.push_back(s.token);
      else
        encode_text(s.text, s.offset == 0, out);
    }
  }
  if (opts.add_bos) out.insert(out.end(), parts_.suffix.begin(), parts_.suffix.end());
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (TokenId id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= parts_.pieces.size())
      continue;  // unknown ids decode to nothing
    if (skip_special && parts_.special[id]) continue;
    pieces.push_back(parts_.pieces[id]);
  }
  std::string bytes = parts_.decoder.decode(std::move(pieces));
  if (text::utf8_valid(bytes)) return bytes;
  return text::utf8_sanitize(bytes);
}

}  // namespace keel
