// Tokenizer::from_json: HF tokenizers' tokenizer.json. Every field is checked for
// type before use; a missing or ill-typed field is Error(kFormat) naming it, and
// ids are bounded so a lying file cannot make keel allocate without limit.
#include <cctype>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe_model.h"
#include "text/byte_level.h"
#include "text/loaders.h"
#include "text/unigram_model.h"
#include "text/wordpiece_model.h"

namespace keel {

namespace {

using nlohmann::json;
using namespace keel::text;

constexpr std::size_t kMaxVocab = 1u << 22;  // 4M ids: far beyond any real vocabulary

struct Ctx {
  std::string origin;
  [[noreturn]] void fail(const std::string &field, const std::string &why) const {
    throw Error(ErrorCode::kFormat, origin + ": " + field + ": " + why);
  }
  const json &get(const json &obj, const char *key, const std::string &path) const {
    if (!obj.is_object()) fail(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(path + "." + key, "missing");
    return *it;
  }
  std::string str(const json &obj, const char *key, const std::string &path) const {
    const json &v = get(obj, key, path);
    if (!v.is_string()) fail(path + "." + key, "expected a string");
    return v.get<std::string>();
  }
  std::string str_or(const json &obj, const char *key, std::string def) const {
    if (!obj.is_object()) return def;
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) return def;
    return it->get<std::string>();
  }
  bool flag(const json &obj, const char *key, bool def) const {
    if (!obj.is_object()) return def;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_boolean()) fail(key, "expected a boolean");
    return it->get<bool>();
  }
  std::int64_t integer(const json &v, const std::string &path) const {
    if (!v.is_number_integer()) fail(path, "expected an integer");
    return v.get<std::int64_t>();
  }
  TokenId id(const json &v, const std::string &path) const {
    std::int64_t x = integer(v, path);
    if (x < 0 || static_cast<std::size_t>(x) >= kMaxVocab) fail(path, "token id out of range");
    return static_cast<TokenId>(x);
  }
};

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && c != ' ') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// A Split / Replace pattern: {"String": "..."} or {"Regex": "..."}.
std::unique_ptr<Regex> pattern_regex(const Ctx &c, const json &p, const std::string &path) {
  if (!p.is_object()) c.fail(path, "expected {String|Regex}");
  if (auto it = p.find("Regex"); it != p.end() && it->is_string())
    return std::make_unique<Regex>(it->get<std::string>(), c.origin + ": " + path);
  if (auto it = p.find("String"); it != p.end() && it->is_string())
    return std::make_unique<Regex>(escape_literal(it->get<std::string>()), c.origin + ": " + path);
  c.fail(path, "expected {String|Regex}");
}

bool tree_has_type(const json &j, std::string_view type) {
  if (j.is_object()) {
    if (auto it = j.find("type"); it != j.end() && it->is_string() && *it == type) return true;
    for (auto &[k, v] : j.items())
      if (tree_has_type(v, type)) return true;
  } else if (j.is_array()) {
    for (auto &v : j)
      if (tree_has_type(v, type)) return true;
  }
  return false;
}

void add_normalizer(const Ctx &c, const json &n, Normalizer &out, const std::string &path) {
  if (n.is_null()) return;
  const std::string type = c.str(n, "type", path);
  if (type == "Sequence") {
    const json &list = c.get(n, "normalizers", path);
    if (!list.is_array()) c.fail(path + ".normalizers", "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      add_normalizer(c, list[i], out, path + ".normalizers[" + std::to_string(i) + "]");
  } else if (type == "NFC") {
    out.add(make_unicode_normalizer(UnicodeForm::kNFC));
  } else if (type == "NFD") {
    out.add(make_unicode_normalizer(UnicodeForm::kNFD));
  } else if (type == "NFKC" || type == "Precompiled") {
    // Precompiled: SentencePiece's compiled nmt_nfkc map, approximated by NFKC.
    out.add(make_unicode_normalizer(UnicodeForm::kNFKC));
  } else if (type == "NFKD") {
    out.add(make_unicode_normalizer(UnicodeForm::kNFKD));
  } else if (type == "Lowercase") {
    out.add(make_lowercase());
  } else if (type == "Prepend") {
    out.add(make_prepend(c.str(n, "prepend", path)));
  } else if (type == "Replace") {
    const json &p = c.get(n, "pattern", path);
    std::string content = c.str(n, "content", path);
    if (p.is_object() && p.contains("String") && p["String"].is_string())
      out.add(make_replace(p["String"].get<std::string>(), std::move(content)));
    else
      out.add(make_regex_replace(pattern_regex(c, p, path + ".pattern"), std::move(content)));
  } else if (type == "Strip") {
    out.add(make_strip(c.flag(n, "strip_left", true), c.flag(n, "strip_right", true)));
  } else if (type == "StripAccents") {
    out.add(make_strip_accents());
  } else if (type == "BertNormalizer") {
    const bool lower = c.flag(n, "lowercase", true);
    out.add(make_bert_normalizer(c.flag(n, "clean_text", true),
                                 c.flag(n, "handle_chinese_chars", true),
                                 c.flag(n, "strip_accents", lower), lower));
  } else if (type == "ByteLevel") {
    // Byte-level models hold raw bytes: nothing to do.
  } else {
    throw Error(ErrorCode::kUnsupported,
                c.origin + ": " + path + ": normalizer " + type + " is not supported");
  }
}

SplitBehavior behavior(const Ctx &c, const json &n, const std::string &path) {
  const std::string b = c.str_or(n, "behavior", "Isolated");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  c.fail(path + ".behavior", "unknown behavior " + b);
}

int prepend_scheme(const Ctx &c, const json &n) {
  if (n.contains("prepend_scheme") && n["prepend_scheme"].is_string()) {
    const std::string s = n["prepend_scheme"];
    return s == "never" ? 0 : s == "first" ? 1 : 2;
  }
  return c.flag(n, "add_prefix_space", true) ? 2 : 0;
}

std::unique_ptr<Regex> rx(const Ctx &c, std::string_view pattern, const std::string &path) {
  return std::make_unique<Regex>(pattern, c.origin + ": " + path);
}

void add_pre_tokenizer(const Ctx &c, const json &n, PreTokenizer &out, const std::string &path) {
  if (n.is_null()) return;
  const std::string type = c.str(n, "type", path);
  if (type == "Sequence") {
    const json &list = c.get(n, "pretokenizers", path);
    if (!list.is_array()) c.fail(path + ".pretokenizers", "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      add_pre_tokenizer(c, list[i], out, path + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (type == "Split") {
    out.add(make_split(pattern_regex(c, c.get(n, "pattern", path), path + ".pattern"),
                       behavior(c, n, path), c.flag(n, "invert", false)));
  } else if (type == "ByteLevel") {
    out.add(make_byte_level(c.flag(n, "add_prefix_space", true),
                            c.flag(n, "use_regex", true) ? rx(c, kGpt2Pattern, path) : nullptr));
  } else if (type == "Metaspace") {
    out.add(make_metaspace(c.str_or(n, "replacement", "\xE2\x96\x81"), prepend_scheme(c, n),
                           c.flag(n, "split", true)));
  } else if (type == "Whitespace") {
    out.add(make_split(rx(c, R"(\w+|[^\w\s]+)", path), SplitBehavior::kRemoved, true));
  } else if (type == "WhitespaceSplit") {
    out.add(make_split(rx(c, R"(\s+)", path), SplitBehavior::kRemoved, false));
  } else if (type == "BertPreTokenizer") {
    out.add(make_split(rx(c, R"(\s+)", path), SplitBehavior::kRemoved, false));
    out.add(make_split(rx(c, R"([\p{P}!-/:-@\[-`{-~])", path), SplitBehavior::kIsolated, false));
  } else if (type == "Punctuation") {
    out.add(make_split(rx(c, R"([\p{P}!-/:-@\[-`{-~])", path), behavior(c, n, path), false));
  } else if (type == "Digits") {
    out.add(
        make_split(rx(c, c.flag(n, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", path),
                   SplitBehavior::kIsolated, false));
  } else {
    throw Error(ErrorCode::kUnsupported,
                c.origin + ": " + path + ": pre-tokenizer " + type + " is not supported");
  }
}

void add_decoder(const Ctx &c, const json &n, Decoder &out, const std::string &path) {
  if (n.is_null()) return;
  const std::string type = c.str(n, "type", path);
  if (type == "Sequence") {
    const json &list = c.get(n, "decoders", path);
    if (!list.is_array()) c.fail(path + ".decoders", "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      add_decoder(c, list[i], out, path + ".decoders[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    out.add(make_byte_level_decoder());
  } else if (type == "ByteFallback") {
    out.add(make_byte_fallback_decoder());
  } else if (type == "Fuse") {
    out.add(make_fuse_decoder());
  } else if (type == "Replace") {
    const json &p = c.get(n, "pattern", path);
    if (!p.is_object() || !p.contains("String") || !p["String"].is_string())
      throw Error(ErrorCode::kUnsupported,
                  c.origin + ": " + path + ": only String Replace decoders are supported");
    out.add(make_replace_decoder(p["String"].get<std::string>(), c.str(n, "content", path)));
  } else if (type == "Strip") {
    const json &s = c.get(n, "start", path);
    const json &e = c.get(n, "stop", path);
    out.add(make_strip_decoder(c.str(n, "content", path),
                               static_cast<int>(c.integer(s, path + ".start")),
                               static_cast<int>(c.integer(e, path + ".stop"))));
  } else if (type == "Metaspace") {
    out.add(
        make_metaspace_decoder(c.str_or(n, "replacement", "\xE2\x96\x81"), prepend_scheme(c, n)));
  } else if (type == "WordPiece") {
    out.add(make_wordpiece_decoder(c.str_or(n, "prefix", "##"), c.flag(n, "cleanup", true)));
  } else if (type == "BPEDecoder") {
    out.add(make_replace_decoder(c.str_or(n, "suffix", "</w>"), " "));
  } else {
    throw Error(ErrorCode::kUnsupported,
                c.origin + ": " + path + ": decoder " + type + " is not supported");
  }
}

// Looks a post-processor's special token up: {"id": ..., "ids": [...]} or a [name, id] pair.
void add_post_processor(const Ctx &c, const json &n, TokenizerParts &parts,
                        const std::string &path) {
  if (n.is_null()) return;
  const std::string type = c.str(n, "type", path);
  if (type == "Sequence") {
    const json &list = c.get(n, "processors", path);
    if (!list.is_array()) c.fail(path + ".processors", "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      add_post_processor(c, list[i], parts, path + ".processors[" + std::to_string(i) + "]");
  } else if (type == "TemplateProcessing") {
    const json &single = c.get(n, "single", path);
    const json &specials = c.get(n, "special_tokens", path);
    if (!single.is_array()) c.fail(path + ".single", "expected an array");
    bool after = false;
    for (const json &item : single) {
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      if (!item.contains("SpecialToken")) c.fail(path + ".single", "unknown item");
      const std::string name = c.str(item["SpecialToken"], "id", path + ".single");
      const json &tok = c.get(specials, name.c_str(), path + ".special_tokens");
      const json &ids = c.get(tok, "ids", path + ".special_tokens." + name);
      if (!ids.is_array()) c.fail(path + ".special_tokens." + name + ".ids", "expected an array");
      for (const json &id : ids)
        (after ? parts.suffix : parts.prefix).push_back(c.id(id, path + ".special_tokens"));
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    const json &cls = c.get(n, "cls", path);
    const json &sep = c.get(n, "sep", path);
    if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2)
      c.fail(path, "expected [token, id] pairs");
    parts.prefix.push_back(c.id(cls[1], path + ".cls"));
    parts.suffix.push_back(c.id(sep[1], path + ".sep"));
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else {
    throw Error(ErrorCode::kUnsupported,
                c.origin + ": " + path + ": post-processor " + type + " is not supported");
  }
}

void set_piece(std::vector<std::string> &pieces, TokenId id, const std::string &s) {
  if (static_cast<std::size_t>(id) >= pieces.size())
    pieces.resize(static_cast<std::size_t>(id) + 1);
  if (pieces[id].empty()) pieces[id] = s;
}

}  // namespace

namespace {
text::TokenizerParts parse_json(std::string_view text, const std::string &origin);
}

text::TokenizerParts text::parts_from_json(std::string_view text, const std::string &origin) {
  try {
    return parse_json(text, origin);
  } catch (const nlohmann::json::exception &e) {
    // A value of an unexpected type deep in the file: still a format error.
    throw Error(ErrorCode::kFormat, origin + ": " + e.what());
  }
}

namespace {
text::TokenizerParts parse_json(std::string_view text, const std::string &origin) {
  Ctx c{origin};
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception &e) {
    throw Error(ErrorCode::kFormat, origin + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) c.fail("(root)", "expected an object");
  TokenizerParts parts;
  parts.origin = origin;
  const json &model = c.get(root, "model", "(root)");
  const std::string mtype = c.str_or(model, "type", model.contains("merges") ? "BPE" : "");
  const json &vocab = c.get(model, "vocab", "model");

  // Added tokens first: their ids bound the vocabulary too.
  std::vector<AddedToken> added;
  if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) c.fail("added_tokens", "expected an array");
    if (it->size() > kMaxVocab) c.fail("added_tokens", "too many entries");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json &t = (*it)[i];
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      AddedToken a;
      a.id = c.id(c.get(t, "id", path), path + ".id");
      a.content = c.str(t, "content", path);
      a.special = c.flag(t, "special", false);
      a.lstrip = c.flag(t, "lstrip", false);
      a.rstrip = c.flag(t, "rstrip", false);
      a.single_word = c.flag(t, "single_word", false);
      added.push_back(std::move(a));
    }
  }

  const bool byte_level = tree_has_type(root["pre_tokenizer"], "ByteLevel") ||
                          tree_has_type(root["decoder"], "ByteLevel");
  std::vector<std::string> &pieces = parts.pieces;
  if (mtype == "BPE" || mtype == "WordPiece" || mtype == "WordLevel") {
    if (!vocab.is_object()) c.fail("model.vocab", "expected an object");
    if (vocab.size() > kMaxVocab) c.fail("model.vocab", "too many entries");
    for (auto &[piece, idv] : vocab.items())
      set_piece(pieces, c.id(idv, "model.vocab." + piece), piece);
  } else if (mtype == "Unigram") {
    if (!vocab.is_array()) c.fail("model.vocab", "expected an array");
    if (vocab.size() > kMaxVocab) c.fail("model.vocab", "too many entries");
    pieces.resize(vocab.size());
  } else {
    throw Error(
        ErrorCode::kUnsupported,
        origin + ": model.type: " + (mtype.empty() ? "(missing)" : mtype) + " is not supported");
  }
  const std::size_t model_size = pieces.size();
  for (const auto &a : added) set_piece(pieces, a.id, a.content);
  parts.special.assign(pieces.size(), 0);
  for (const auto &a : added)
    if (a.special) parts.special[a.id] = 1;

  std::optional<TokenId> unk;
  if (auto u = c.str_or(model, "unk_token", ""); !u.empty()) {
    if (vocab.is_object() && vocab.contains(u)) unk = c.id(vocab[u], "model.unk_token");
  }

  if (mtype == "BPE") {
    std::vector<std::string> symbols(pieces.begin(), pieces.begin() + model_size);
    if (byte_level)
      for (auto &s : symbols) s = byte_level_decode(s);
    const json &merges = c.get(model, "merges", "model");
    if (!merges.is_array()) c.fail("model.merges", "expected an array");
    std::unordered_map<std::string, TokenId> vmap;  // piece -> id: faster than json lookups
    vmap.reserve(vocab.size());
    for (auto &[piece, idv] : vocab.items()) vmap.emplace(piece, c.id(idv, "model.vocab"));
    std::vector<BpeMerge> ms;
    ms.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const json &m = merges[i];
      std::string a, b;
      if (m.is_string()) {
        const std::string &s = m.get_ref<const std::string &>();
        const std::size_t sp = s.find(' ', 1);
        if (sp == std::string::npos)
          c.fail("model.merges[" + std::to_string(i) + "]", "expected \"a b\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        c.fail("model.merges[" + std::to_string(i) + "]", "expected \"a b\" or [a, b]");
      }
      auto ia = vmap.find(a), ib = vmap.find(b), ir = vmap.find(a + b);
      if (ia == vmap.end() || ib == vmap.end() || ir == vmap.end())
        continue;  // HF rejects; be lenient
      ms.push_back({ia->second, ib->second, ir->second, static_cast<std::int32_t>(i)});
    }
    BpeOptions o;
    o.byte_level = byte_level;
    o.byte_fallback = c.flag(model, "byte_fallback", false);
    o.fuse_unk = c.flag(model, "fuse_unk", false);
    o.ignore_merges = c.flag(model, "ignore_merges", false);
    o.unk = unk;
    if (!c.str_or(model, "continuing_subword_prefix", "").empty() ||
        !c.str_or(model, "end_of_word_suffix", "").empty())
      throw Error(ErrorCode::kUnsupported,
                  origin + ": model: BPE subword prefix/suffix is not supported");
    parts.model = std::make_unique<BpeModel>(std::move(symbols), ms, o);
  } else if (mtype == "Unigram") {
    std::vector<float> scores(model_size, 0.0f);
    std::vector<std::string> ps(model_size);
    for (std::size_t i = 0; i < model_size; ++i) {
      const json &e = vocab[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        c.fail("model.vocab[" + std::to_string(i) + "]", "expected [piece, score]");
      ps[i] = e[0].get<std::string>();
      scores[i] = e[1].get<float>();
      if (pieces[i].empty()) pieces[i] = ps[i];
    }
    if (auto it = model.find("unk_id"); it != model.end() && !it->is_null()) {
      unk = c.id(*it, "model.unk_id");
      if (static_cast<std::size_t>(*unk) >= model_size) c.fail("model.unk_id", "out of range");
    }
    parts.model = std::make_unique<UnigramModel>(std::move(ps), std::move(scores), unk,
                                                 c.flag(model, "byte_fallback", false));
  } else if (mtype == "WordPiece") {
    std::vector<std::string> ps(pieces.begin(), pieces.begin() + model_size);
    const json &mc =
        model.contains("max_input_chars_per_word") ? model["max_input_chars_per_word"] : json(100);
    parts.model = std::make_unique<WordPieceModel>(
        std::move(ps), c.str_or(model, "continuing_subword_prefix", "##"), unk,
        static_cast<std::size_t>(c.integer(mc, "model.max_input_chars_per_word")));
  } else {
    throw Error(ErrorCode::kUnsupported, origin + ": model.type: WordLevel is not supported");
  }

  add_normalizer(c, root.value("normalizer", json()), parts.normalizer, "normalizer");
  add_pre_tokenizer(c, root.value("pre_tokenizer", json()), parts.pre_tokenizer, "pre_tokenizer");
  add_decoder(c, root.value("decoder", json()), parts.decoder, "decoder");
  add_post_processor(c, root.value("post_processor", json()), parts, "post_processor");
  for (TokenId id : parts.prefix)
    if (static_cast<std::size_t>(id) >= pieces.size())
      c.fail("post_processor", "token id out of range");
  for (TokenId id : parts.suffix)
    if (static_cast<std::size_t>(id) >= pieces.size())
      c.fail("post_processor", "token id out of range");
  parts.added.build(std::move(added));

  // BOS/EOS without tokenizer_config.json: the post-processor's first token, and the
  // conventional end tokens that the vocabulary has.
  if (!parts.prefix.empty()) parts.bos = parts.prefix.front();
  for (const char *name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>",
                           "<eos>", "<end_of_turn>", "[SEP]"}) {
    for (const auto &t : parts.added.tokens())
      if (t.content == name) parts.eos.push_back(t.id);
  }
  return parts;
}
}  // namespace

}  // namespace keel
