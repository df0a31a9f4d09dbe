#include "grammar/token_vocab.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "text/tokenizer.h"

namespace keel::grammar {

TokenVocab::TokenVocab(std::vector<std::string> bytes, std::vector<TokenId> eos_ids,
                       const std::vector<TokenId> &excluded)
    : bytes_(std::move(bytes)), eos_(std::move(eos_ids)) {
  std::vector<char> skip(bytes_.size(), 0);
  for (TokenId id : excluded)
    if (id >= 0 && std::size_t(id) < skip.size()) skip[id] = 1;
  for (TokenId id : eos_)
    if (id >= 0 && std::size_t(id) < skip.size()) skip[id] = 1;
  std::vector<TokenId> order;
  for (std::size_t i = 0; i < bytes_.size(); ++i)
    if (!skip[i] && !bytes_[i].empty() && bytes_[i].size() < 0xFFFF) order.push_back(TokenId(i));
  std::sort(order.begin(), order.end(),
            [&](TokenId a, TokenId b) { return bytes_[a] < bytes_[b]; });
  // Sorted strings give the trie in preorder: keep the path to the last string.
  trie_.push_back({});
  std::vector<std::uint32_t> path{0};
  auto close_to = [&](std::size_t depth) {
    while (path.size() > depth + 1) {
      trie_[path.back()].end = std::uint32_t(trie_.size());
      path.pop_back();
    }
  };
  const std::string *prev = nullptr;
  for (TokenId id : order) {
    const std::string &s = bytes_[id];
    max_len_ = std::max(max_len_, s.size());
    std::size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    close_to(common);
    for (std::size_t d = common; d < s.size(); ++d) {
      TrieNode n;
      n.byte = std::uint8_t(s[d]);
      n.depth = std::uint16_t(d + 1);
      n.parent = path.back();
      n.tokens_begin = n.tokens_end = std::uint32_t(trie_tokens_.size());
      path.push_back(std::uint32_t(trie_.size()));
      trie_.push_back(n);
    }
    trie_tokens_.push_back(id);
    trie_[path.back()].tokens_end = std::uint32_t(trie_tokens_.size());
    prev = &s;
  }
  close_to(0);
  trie_[0].end = std::uint32_t(trie_.size());
}

namespace {

// Harmony's (gpt-oss's) message markup: in a harmony vocabulary a forced tool call's
// header is written with these special tokens, as the model was trained (they are kept
// in streamed text, so the parser reads the same text either way). Its ends (<|call|>,
// <|return|>) stay end tokens.
std::vector<TokenId> harmony_markers(const Tokenizer &tok) {
  auto special = [&](std::string_view m) -> std::optional<TokenId> {
    auto id = tok.token_to_id(m);
    return id && tok.is_special(*id) ? id : std::nullopt;
  };
  std::vector<TokenId> ids;
  if (!special("<|channel|>") || !special("<|constrain|>")) return ids;  // not harmony
  for (std::string_view m : {"<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"})
    if (auto id = special(m)) ids.push_back(*id);
  return ids;
}

}  // namespace

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer &tok,
                                                             std::size_t size) {
  const std::size_t n = std::max(size, tok.vocab_size());
  std::vector<std::string> bytes(n);
  std::vector<TokenId> excluded;
  const std::vector<TokenId> markers = harmony_markers(tok);
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) {
    const bool marker = std::find(markers.begin(), markers.end(), TokenId(i)) != markers.end();
    if (tok.is_special(TokenId(i)) && !marker)
      excluded.push_back(TokenId(i));
    else
      bytes[i] = tok.token_bytes(TokenId(i));
  }
  return std::make_shared<const TokenVocab>(std::move(bytes), tok.eos_ids(), excluded);
}

bool TokenVocab::is_eos(TokenId id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

}  // namespace keel::grammar
