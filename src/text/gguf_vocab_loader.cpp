// GGUF-embedded vocabularies (llama.cpp's tokenizer.ggml.* keys): "gpt2" (byte-level
// BPE with merges and a pre-tokenizer chosen by tokenizer.ggml.pre), "llama"
// (SentencePiece), "bert" (WordPiece).
#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_config.h"
#include "text/bpe_model.h"
#include "text/byte_level.h"
#include "text/loaders.h"
#include "text/spm_pipeline.h"
#include "text/wordpiece_model.h"

namespace keel::text {

namespace {

constexpr std::size_t kMaxVocab = 1u << 22;

std::vector<std::string> strings(const GgufFile &g, const char *key) {
  const GgufValue &v = g.get_array(key);
  if (v.elem_type() != GgufType::kString)
    throw Error(ErrorCode::kFormat, g.path() + ": " + key + ": expected strings");
  if (v.size() > kMaxVocab)
    throw Error(ErrorCode::kFormat, g.path() + ": " + key + ": too many entries");
  std::vector<std::string> out;
  out.reserve(v.size());
  for (auto s : v.strings()) out.emplace_back(s);
  return out;
}

template <typename T>
std::vector<T> numbers(const GgufFile &g, const char *key, std::size_t n, T def) {
  const GgufValue *v = g.get_opt_array(key);
  if (!v) return std::vector<T>(n, def);
  std::vector<T> out;
  if constexpr (std::is_floating_point_v<T>) {
    auto f = v->to_f32();
    if (!f) throw Error(ErrorCode::kFormat, g.path() + ": " + key + ": expected numbers");
    out.assign(f->begin(), f->end());
  } else {
    auto i = v->to_i32();
    if (!i) throw Error(ErrorCode::kFormat, g.path() + ": " + key + ": expected integers");
    out.assign(i->begin(), i->end());
  }
  if (out.size() != n)
    throw Error(ErrorCode::kFormat, g.path() + ": " + key + ": length differs from the token list");
  return out;
}

std::optional<TokenId> opt_id(const GgufFile &g, const char *key, std::size_t n) {
  auto v = g.get_opt_i64(key);
  if (!v || *v < 0 || static_cast<std::size_t>(*v) >= n) return std::nullopt;
  return static_cast<TokenId>(*v);
}

TokenizerParts gpt2_parts(const GgufFile &g, std::vector<std::string> tokens,
                          const std::vector<int> &types) {
  TokenizerParts parts;
  parts.origin = g.path();
  const std::size_t n = tokens.size();
  std::unordered_map<std::string, TokenId> index;
  index.reserve(n);
  for (std::size_t id = 0; id < n; ++id) index.emplace(tokens[id], static_cast<TokenId>(id));
  std::vector<BpeMerge> merges;
  if (g.get_opt_array("tokenizer.ggml.merges")) {
    const auto ms = strings(g, "tokenizer.ggml.merges");
    merges.reserve(ms.size());
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const std::string &m = ms[i];
      const std::size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      auto a = index.find(m.substr(0, sp)), b = index.find(m.substr(sp + 1)),
           r = index.find(m.substr(0, sp) + m.substr(sp + 1));
      if (a == index.end() || b == index.end() || r == index.end()) continue;
      merges.push_back({a->second, b->second, r->second, static_cast<std::int32_t>(i)});
    }
  }
  // Control and user-defined tokens are added tokens; the rest is the BPE model.
  std::vector<std::string> symbols(n);
  std::vector<AddedToken> added;
  parts.special.assign(n, 0);
  for (std::size_t id = 0; id < n; ++id) {
    const int t = types[id];
    if (t == kSpmControl || t == kSpmUserDefined) {
      parts.special[id] = t == kSpmControl;
      added.push_back({static_cast<TokenId>(id), tokens[id], t == kSpmControl});
    } else {
      symbols[id] = byte_level_decode(tokens[id]);
    }
  }
  const std::string pre = std::string(g.get_opt_string("tokenizer.ggml.pre").value_or("default"));
  BpeOptions o;
  o.byte_level = true;
  o.ignore_merges = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" ||
                    pre == "falcon3" || pre == "pixtral" || pre == "tekken";
  parts.model = std::make_unique<BpeModel>(std::move(symbols), merges, o);
  for (const std::string &re : gguf_pre_tokenizer_regexes(pre, g.path()))
    parts.pre_tokenizer.add(
        make_split(std::make_unique<Regex>(re, g.path() + ": tokenizer.ggml.pre " + pre),
                   SplitBehavior::kIsolated, false));
  parts.decoder.add(make_byte_level_decoder());
  // llama.cpp stores control and user-defined tokens as raw text and prints them as
  // such (DeepSeek's "ü" added token is the byte 0xFC if read as byte-level): give
  // them the byte-level spelling of their text so that the decoder restores it.
  for (const auto &a : added) tokens[a.id] = byte_level_encode(a.content);
  parts.pieces = std::move(tokens);
  parts.added.build(std::move(added));
  return parts;
}

TokenizerParts bert_parts(const GgufFile &g, std::vector<std::string> tokens,
                          const std::vector<int> &types) {
  // llama.cpp stores WordPiece vocabularies with "▁" marking word starts instead of
  // "##" marking continuations; turn them back.
  TokenizerParts parts;
  parts.origin = g.path();
  const std::size_t n = tokens.size();
  std::vector<std::string> pieces(n);
  std::vector<AddedToken> added;
  parts.special.assign(n, 0);
  for (std::size_t id = 0; id < n; ++id) {
    const std::string &t = tokens[id];
    if (types[id] == kSpmControl || types[id] == kSpmUnknown) {
      parts.special[id] = 1;
      added.push_back({static_cast<TokenId>(id), t, true});
      pieces[id] = t;
    } else if (t.starts_with("\xE2\x96\x81")) {
      pieces[id] = t.substr(3);
    } else {
      pieces[id] = "##" + t;
    }
  }
  auto unk = opt_id(g, "tokenizer.ggml.unknown_token_id", n);
  parts.model = std::make_unique<WordPieceModel>(pieces, "##", unk, 100);
  parts.normalizer.add(make_bert_normalizer(true, true, true, true));
  parts.pre_tokenizer.add(
      make_split(std::make_unique<Regex>(R"(\s+)", g.path()), SplitBehavior::kRemoved, false));
  parts.pre_tokenizer.add(make_split(std::make_unique<Regex>(R"([\p{P}!-/:-@\[-`{-~])", g.path()),
                                     SplitBehavior::kIsolated, false));
  parts.decoder.add(make_wordpiece_decoder("##", true));
  parts.pieces = std::move(pieces);
  parts.added.build(std::move(added));
  auto cls = opt_id(g, "tokenizer.ggml.cls_token_id", n);
  auto sep = opt_id(g, "tokenizer.ggml.seperator_token_id", n);
  if (cls) parts.prefix.push_back(*cls);
  if (sep) parts.suffix.push_back(*sep);
  return parts;
}

}  // namespace

TokenizerParts parts_from_gguf(const GgufFile &g) {
  const std::string model = std::string(g.get_string("tokenizer.ggml.model"));
  std::vector<std::string> tokens = strings(g, "tokenizer.ggml.tokens");
  if (tokens.empty()) throw Error(ErrorCode::kFormat, g.path() + ": tokenizer.ggml.tokens: empty");
  const std::size_t n = tokens.size();
  const std::vector<int> types = numbers<int>(g, "tokenizer.ggml.token_type", n, kSpmNormal);
  TokenizerParts parts;
  if (model == "gpt2") {
    parts = gpt2_parts(g, std::move(tokens), types);
  } else if (model == "llama") {
    SpmVocab v;
    v.origin = g.path();
    v.scores = numbers<float>(g, "tokenizer.ggml.scores", n, 0.0f);
    v.types = types;
    v.pieces = std::move(tokens);
    v.bpe = true;
    v.byte_fallback = true;
    v.add_dummy_prefix = g.get_opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    v.remove_extra_whitespaces =
        g.get_opt_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);
    v.unk_id = opt_id(g, "tokenizer.ggml.unknown_token_id", n).value_or(0);
    v.bos_id = opt_id(g, "tokenizer.ggml.bos_token_id", n).value_or(1);
    v.eos_id = opt_id(g, "tokenizer.ggml.eos_token_id", n).value_or(2);
    v.add_bos = g.get_opt_bool("tokenizer.ggml.add_bos_token").value_or(true);
    parts = build_spm_parts(std::move(v));
  } else if (model == "bert") {
    parts = bert_parts(g, std::move(tokens), types);
  } else {
    throw Error(ErrorCode::kUnsupported,
                g.path() + ": tokenizer.ggml.model " + model + " is not supported");
  }
  if (model != "llama") {
    const auto cfg = TokenizerConfig::from_gguf(g);
    if (cfg.bos_id) parts.bos = *cfg.bos_id;
    if (cfg.eos_id) parts.eos = {*cfg.eos_id};
    if (model == "gpt2") {
      parts.prefix.clear();
      parts.suffix.clear();
      if (cfg.add_bos_token.value_or(false) && parts.bos) parts.prefix.push_back(*parts.bos);
      if (cfg.add_eos_token.value_or(false) && !parts.eos.empty())
        parts.suffix.push_back(parts.eos.front());
    }
  }
  if (auto eot = opt_id(g, "tokenizer.ggml.eot_token_id", parts.pieces.size()))
    if (std::find(parts.eos.begin(), parts.eos.end(), *eot) == parts.eos.end())
      parts.eos.push_back(*eot);
  return parts;
}

}  // namespace keel::text
