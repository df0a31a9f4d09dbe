// ModelText over keel's tokenizers and chat templates (src/text), for HF directories
// and GGUF files.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_config.h"
#include "registry/model_text.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer.h"

namespace keel {

namespace {

// Emits text once it is stable: decodes a small window of recent tokens and sends
// what the newest token added, holding back while the tail is an incomplete UTF-8
// character (decode shows it as U+FFFD). The window keeps SentencePiece-style
// leading-space handling right without decoding everything every time. Special tokens
// are dropped as they arrive, except the tool-call markers in `kept`, which the
// tool-call parser must see.
class WindowDetokenizer final : public StreamingDetokenizer {
 public:
  WindowDetokenizer(const Tokenizer &tok, const std::vector<TokenId> &kept)
      : tok_(tok), kept_(kept) {}

  std::string push(TokenId token) override {
    if (tok_.is_special(token) && std::find(kept_.begin(), kept_.end(), token) == kept_.end())
      return {};
    ids_.push_back(token);
    return advance(false);
  }
  std::string flush() override { return advance(true); }

 private:
  std::string advance(bool final) {
    if (read_ >= ids_.size()) return {};
    std::span<const TokenId> all(ids_);
    const std::string prefix = tok_.decode(all.subspan(prefix_, read_ - prefix_), false);
    const std::string text = tok_.decode(all.subspan(prefix_), false);
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    const bool incomplete =
        text.size() >= 3 && std::string_view(text).substr(text.size() - 3) == kReplacement;
    if (text.size() <= prefix.size() || (incomplete && !final && ids_.size() - read_ < 4))
      return {};
    std::string out =
        text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text;
    prefix_ = read_;
    read_ = ids_.size();
    // Keep the window short: tokens before prefix_ no longer affect the output.
    if (prefix_ > 64) {
      ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
      read_ -= prefix_;
      prefix_ = 0;
    }
    return out;
  }

  const Tokenizer &tok_;
  const std::vector<TokenId> &kept_;
  std::vector<TokenId> ids_;
  std::size_t prefix_ = 0, read_ = 0;
};

// Markers that open tool calls in model output (Mistral, Llama 3.x, Hermes/Qwen), and
// harmony's message markup (gpt-oss: the parsers split channels and calls by it). Where
// a vocabulary makes one a special token, streamed text would otherwise lose it.
std::vector<TokenId> special_tool_markers(const Tokenizer &tok) {
  std::vector<TokenId> ids;
  EncodeOptions o;
  o.allow_special = true;
  o.add_bos = false;
  auto special = [&](std::string_view m) -> std::optional<TokenId> {
    const auto enc = tok.encode(m, o);
    if (enc.size() == 1 && tok.is_special(enc[0])) return enc[0];
    return std::nullopt;
  };
  for (std::string_view m : {"[TOOL_CALLS]", "<|python_tag|>", "<tool_call>", "</tool_call>"})
    if (auto id = special(m)) ids.push_back(*id);
  // Only a harmony vocabulary's: <|end|> is also Phi-3's end of turn, not to be shown.
  if (special("<|channel|>") && special("<|constrain|>"))
    for (std::string_view m : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                               "<|constrain|>", "<|call|>", "<|return|>"})
      if (auto id = special(m)) ids.push_back(*id);
  return ids;
}

class HfModelText final : public ModelText {
 public:
  HfModelText(std::unique_ptr<Tokenizer> tok, std::optional<ChatTemplate> tmpl)
      : tok_(std::move(tok)), tmpl_(std::move(tmpl)), tool_markers_(special_tool_markers(*tok_)) {}

  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const override {
    EncodeOptions o;
    o.allow_special = true;
    o.add_bos = add_special_tokens;
    return tok_->encode(text, o);
  }
  std::string decode(const std::vector<TokenId> &ids) const override {
    return tok_->decode(ids, false);
  }
  std::string token_text(TokenId id) const override {
    if (id < 0 || static_cast<std::size_t>(id) >= tok_->vocab_size()) return "";
    return tok_->token_bytes(id);
  }
  std::unique_ptr<StreamingDetokenizer> streaming() const override {
    return std::make_unique<WindowDetokenizer>(*tok_, tool_markers_);
  }
  bool has_chat_template() const override { return tmpl_.has_value(); }
  std::string render_chat(const nlohmann::ordered_json &messages,
                          const nlohmann::ordered_json &tools,
                          bool add_generation_prompt) const override {
    return render_chat(messages, tools, add_generation_prompt, nlohmann::ordered_json::object());
  }
  std::string render_chat(const nlohmann::ordered_json &messages,
                          const nlohmann::ordered_json &tools, bool add_generation_prompt,
                          const nlohmann::ordered_json &kwargs) const override {
    if (!tmpl_) throw Error(ErrorCode::kUnsupported, "model has no chat template");
    try {
      // Request JSON is parsed keeping key order, so tool schemas print as clients sent them.
      return tmpl_->render(messages, tools, add_generation_prompt,
                           kwargs.is_object() ? kwargs : nlohmann::ordered_json::object());
    } catch (const Error &e) {
      throw Error(ErrorCode::kInvalidArgument, e.what());
    }
  }
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(tok_->vocab_size()); }

 private:
  std::unique_ptr<Tokenizer> tok_;
  std::optional<ChatTemplate> tmpl_;
  std::vector<TokenId> tool_markers_;  // special tokens the streamed text keeps
};

}  // namespace

std::unique_ptr<ModelText> load_model_text(const std::filesystem::path &model_path) {
  auto tok = Tokenizer::load(model_path);
  std::optional<ChatTemplate> tmpl;
  std::error_code ec;
  if (std::filesystem::is_directory(model_path, ec)) {
    try {
      tmpl.emplace(ChatTemplate::load(model_path));
    } catch (const Error &e) {
      if (e.code() != ErrorCode::kNotFound) throw;  // a broken template is an error; none is fine
    }
  } else if (model_path.extension() == ".gguf") {
    auto gguf = GgufFile::open(model_path);
    tmpl = ChatTemplate::from_config(TokenizerConfig::from_gguf(*gguf));
  }
  return std::make_unique<HfModelText>(std::move(tok), std::move(tmpl));
}

}  // namespace keel
