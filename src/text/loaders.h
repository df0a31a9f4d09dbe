// Parsers that turn each tokenizer format into TokenizerParts. Tokenizer::load and
// the from_* factories call them; tests and fuzzers may call them directly.
#pragma once

#include <string>
#include <string_view>

#include "text/tokenizer_parts.h"

namespace keel {
class GgufFile;
struct TokenizerConfig;
}  // namespace keel

namespace keel::text {

TokenizerParts parts_from_json(std::string_view json, const std::string &origin);
TokenizerParts parts_from_spm(std::string_view bytes, const std::string &origin);
// name: cl100k_base, o200k_base, p50k_base, r50k_base (chooses regex and specials).
TokenizerParts parts_from_tiktoken(std::string_view text, std::string_view name,
                                   const std::string &origin);
TokenizerParts parts_from_gguf(const GgufFile &gguf);

// The regexes of a GGUF tokenizer.ggml.pre name (llama.cpp's names), applied in order
// as isolating splits. Unknown names throw Error(kUnsupported).
std::vector<std::string> gguf_pre_tokenizer_regexes(std::string_view pre,
                                                    const std::string &origin);

// Applies tokenizer_config.json settings: BOS/EOS tokens and, for tokenizer classes
// that honour it (Llama, Gemma), add_bos_token / add_eos_token.
void apply_config(TokenizerParts &parts, const TokenizerConfig &cfg);

}  // namespace keel::text
