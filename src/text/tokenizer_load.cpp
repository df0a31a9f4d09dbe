// Tokenizer::load: finds the tokenizer in a path and picks the parser.
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_config.h"
#include "text/loaders.h"
#include "text/tokenizer.h"

namespace keel {

namespace {

constexpr std::uintmax_t kMaxTokenizerFile = 1ull << 30;  // 1 GiB: no real tokenizer is larger

std::string read_file(const std::filesystem::path &p) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(p, ec);
  if (ec) throw Error(ErrorCode::kNotFound, p.string() + ": cannot open: " + ec.message());
  if (size > kMaxTokenizerFile)
    throw Error(ErrorCode::kFormat, p.string() + ": too large for a tokenizer");
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(ErrorCode::kNotFound, p.string() + ": cannot open");
  std::string data(size, '\0');
  f.read(data.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(f.gcount()) != size)
    throw Error(ErrorCode::kFormat, p.string() + ": short read");
  return data;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view json, const std::string &origin) {
  return std::make_unique<Tokenizer>(text::parts_from_json(json, origin));
}

std::unique_ptr<Tokenizer> Tokenizer::from_spm(std::string_view bytes, const std::string &origin) {
  return std::make_unique<Tokenizer>(text::parts_from_spm(bytes, origin));
}

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken(std::string_view text, std::string_view name,
                                                    const std::string &origin) {
  return std::make_unique<Tokenizer>(text::parts_from_tiktoken(text, name, origin));
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::filesystem::path &path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path))
    throw Error(ErrorCode::kNotFound, path.string() + ": no such file or directory");
  if (fs::is_directory(path)) {
    text::TokenizerParts parts;
    if (fs::exists(path / "tokenizer.json")) {
      parts = text::parts_from_json(read_file(path / "tokenizer.json"),
                                    (path / "tokenizer.json").string());
    } else if (fs::exists(path / "tokenizer.model")) {
      parts = text::parts_from_spm(read_file(path / "tokenizer.model"),
                                   (path / "tokenizer.model").string());
    } else {
      throw Error(ErrorCode::kNotFound,
                  path.string() + ": no tokenizer.json or tokenizer.model in the directory");
    }
    text::apply_config(parts, TokenizerConfig::load(path));
    return std::make_unique<Tokenizer>(std::move(parts));
  }
  const std::string ext = path.extension().string();
  if (ext == ".gguf") {
    auto gguf = GgufFile::open(path);
    return std::make_unique<Tokenizer>(text::parts_from_gguf(*gguf));
  }
  if (ext == ".tiktoken")
    return from_tiktoken(read_file(path), path.stem().string(), path.string());
  if (ext == ".json") {
    auto parts = text::parts_from_json(read_file(path), path.string());
    const auto cfg = path.parent_path() / "tokenizer_config.json";
    if (fs::exists(cfg)) text::apply_config(parts, TokenizerConfig::load(cfg));
    return std::make_unique<Tokenizer>(std::move(parts));
  }
  // Anything else: a SentencePiece model (".model" or no extension).
  return from_spm(read_file(path), path.string());
}

namespace text {

void apply_config(TokenizerParts &parts, const TokenizerConfig &cfg) {
  auto find = [&](const std::optional<std::string> &s) -> std::optional<TokenId> {
    if (!s) return std::nullopt;
    for (const auto &t : parts.added.tokens())
      if (t.content == *s) return t.id;
    for (std::size_t id = 0; id < parts.pieces.size(); ++id)
      if (parts.pieces[id] == *s) return static_cast<TokenId>(id);
    return std::nullopt;
  };
  if (auto b = find(cfg.bos_token)) parts.bos = *b;
  if (auto e = find(cfg.eos_token)) {
    std::erase(parts.eos, *e);
    parts.eos.insert(parts.eos.begin(), *e);
  }
  const std::string cls = cfg.tokenizer_class.value_or("");
  const bool honours =
      cls.starts_with("Llama") || cls.starts_with("CodeLlama") || cls.starts_with("Gemma");
  if (honours && (cfg.add_bos_token || cfg.add_eos_token)) {
    parts.prefix.clear();
    parts.suffix.clear();
    if (cfg.add_bos_token.value_or(true) && parts.bos) parts.prefix.push_back(*parts.bos);
    if (cfg.add_eos_token.value_or(false) && !parts.eos.empty())
      parts.suffix.push_back(parts.eos.front());
  }
}

}  // namespace text

}  // namespace keel
