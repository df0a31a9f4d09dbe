// tiktoken rank files ("<base64 token> <rank>" per line): byte-level BPE whose merge
// order is the rank of the merged token, with OpenAI's published split patterns.
#include <charconv>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe_model.h"
#include "text/loaders.h"

namespace keel::text {

namespace {

bool base64_decode(std::string_view in, std::string &out) {
  out.clear();
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

constexpr std::string_view kCl100k =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
constexpr std::string_view kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kR50k =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

TokenizerParts parts_from_tiktoken(std::string_view text, std::string_view name,
                                   const std::string &origin) {
  TokenizerParts parts;
  parts.origin = origin;
  std::vector<std::string> &pieces = parts.pieces;
  std::unordered_map<std::string, TokenId> index;
  std::string tok;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::size_t sp = line.find(' ');
    std::uint32_t rank = 0;
    if (sp == std::string_view::npos || !base64_decode(line.substr(0, sp), tok) || tok.empty() ||
        std::from_chars(line.data() + sp + 1, line.data() + line.size(), rank).ec != std::errc() ||
        rank >= (1u << 22))
      throw Error(ErrorCode::kFormat,
                  origin + ":" + std::to_string(line_no) + ": expected \"<base64> <rank>\"");
    if (rank >= pieces.size()) pieces.resize(rank + 1);
    pieces[rank] = tok;
    index.emplace(tok, static_cast<TokenId>(rank));
  }
  if (index.empty()) throw Error(ErrorCode::kFormat, origin + ": no tokens");
  // Every split of a token into two tokens is a merge ranked by the token's rank.
  std::vector<BpeMerge> merges;
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    const std::string &p = pieces[id];
    for (std::size_t k = 1; k < p.size(); ++k) {
      auto a = index.find(p.substr(0, k));
      if (a == index.end()) continue;
      auto b = index.find(p.substr(k));
      if (b == index.end()) continue;
      merges.push_back(
          {a->second, b->second, static_cast<TokenId>(id), static_cast<std::int32_t>(id)});
    }
  }
  std::vector<AddedToken> specials;
  std::string_view pattern = kR50k;
  auto add = [&](std::string content, TokenId id) {
    specials.push_back({id, std::move(content), true});
  };
  if (name == "cl100k_base") {
    pattern = kCl100k;
    add("<|endoftext|>", 100257);
    add("<|fim_prefix|>", 100258);
    add("<|fim_middle|>", 100259);
    add("<|fim_suffix|>", 100260);
    add("<|endofprompt|>", 100276);
  } else if (name == "o200k_base") {
    pattern = kO200k;
    add("<|endoftext|>", 199999);
    add("<|endofprompt|>", 200018);
  } else if (name == "o200k_harmony") {
    // gpt-oss: o200k_base plus the harmony chat format's tokens; every other id up to
    // the vocabulary's 201,088 is <|reserved_N|>. <|return|> first: it ends a reply.
    pattern = kO200k;
    add("<|return|>", 200002);
    add("<|startoftext|>", 199998);
    add("<|endoftext|>", 199999);
    add("<|constrain|>", 200003);
    add("<|channel|>", 200005);
    add("<|start|>", 200006);
    add("<|end|>", 200007);
    add("<|message|>", 200008);
    add("<|call|>", 200012);
    add("<|endofprompt|>", 200018);
    for (TokenId id = 200000; id < 201088; ++id)
      if (id <= 200011 ? (id <= 200001 || id == 200004 || id >= 200009)
                       : id != 200012 && id != 200018)
        add("<|reserved_" + std::to_string(id) + "|>", id);
  } else {
    add("<|endoftext|>", 50256);
    if (name == "p50k_base" || name == "p50k_edit") {
      if (name == "p50k_edit") {
        add("<|fim_prefix|>", 50281);
        add("<|fim_middle|>", 50282);
        add("<|fim_suffix|>", 50283);
      }
    }
  }
  // p50k_base adds runs of 2-25 spaces as tokens after r50k's vocabulary; the file has them.
  BpeOptions o;
  o.byte_level = true;
  parts.model = std::make_unique<BpeModel>(pieces, merges, o);
  for (const auto &s : specials) {
    if (static_cast<std::size_t>(s.id) >= pieces.size()) pieces.resize(s.id + 1);
    pieces[s.id] = s.content;
  }
  parts.special.assign(pieces.size(), 0);
  for (const auto &s : specials) parts.special[s.id] = 1;
  parts.eos.push_back(specials.front().id);
  parts.added.build(std::move(specials));
  parts.pre_tokenizer.add(
      make_split(std::make_unique<Regex>(pattern, origin), SplitBehavior::kIsolated, false));
  return parts;
}

}  // namespace keel::text
