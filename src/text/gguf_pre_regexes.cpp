// tokenizer.ggml.pre names (as llama.cpp's converter writes them) -> the split
// regexes of the HF pre-tokenizer they stand for, applied in order as isolating
// splits. These are the models' own published patterns.
#include <map>

#include "core/error.h"
#include "text/loaders.h"

namespace keel::text {

namespace {

const char *const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char *const kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char *const kBloom = R"( ?[^(\s|.,!?…。，、।۔،)]+)";

std::vector<std::string> lookup(std::string_view pre) {
  using V = std::vector<std::string>;
  static const std::map<std::string_view, V, std::less<>> table = {
      {"llama3", {kLlama3}},
      {"llama-v3", {kLlama3}},
      {"llama-bpe", {kLlama3}},
      {"falcon3", {kLlama3}},
      {"pixtral", {kLlama3}},
      {"dbrx", {kLlama3}},
      {"smaug-bpe", {kLlama3}},
      {"chatglm-bpe", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"deepseek-r1-qwen", {kQwen2}},
      {"stablelm2", {kQwen2}},
      {"megrez", {kQwen2}},
      {"gpt-2", {kGpt2}},
      {"phi-2", {kGpt2}},
      {"mpt", {kGpt2}},
      {"olmo", {kGpt2}},
      {"jais", {kGpt2}},
      {"roberta-bpe", {kGpt2}},
      {"jina-es", {kGpt2}},
      {"jina-de", {kGpt2}},
      {"gigachat", {kGpt2}},
      {"jina-v1-en", {kGpt2}},
      {"jina-v2-es", {kGpt2}},
      {"jina-v2-de", {kGpt2}},
      {"jina-v2-code", {kGpt2}},
      {"starcoder", {R"(\p{N})", kGpt2}},
      {"refact", {R"(\p{N})", kGpt2}},
      {"command-r", {R"(\p{N})", kGpt2}},
      {"smollm", {R"(\p{N})", kGpt2}},
      {"codeshell", {R"(\p{N})", kGpt2}},
      {"exaone", {R"(\p{N})", kGpt2}},
      {"minerva-7b", {R"(\p{N})", kGpt2}},
      {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      // DeepSeek LLM's classes, written as code points (NFC would fold some of the
      // Greek and letterlike characters of the published pattern).
      {"deepseek-llm",
       {R"([\r\n])",
        R"(\s?[)"
        R"(\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})"
        R"(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}-\x{377}\x{37B}-\x{37D}\x{37F}\x{386})"
        R"(\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-)"
        R"(\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-)"
        R"(\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-)"
        R"(\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
        R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-)"
        R"(\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-)"
        R"(\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128})"
        R"(\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
        R"(\x{2183}-\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}-\x{2CF3})"
        R"(\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E})"
        R"(\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
        R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-)"
        R"(\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})"
        R"(]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)", R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N}+)"}},
      {"deepseek-coder",
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
        R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})"}},
      {"deepseek-v3",
       {"\\p{N}{1,3}", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        "[!\"#$%&'()*+,\\-./"
        ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
        "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
      {"tekken", {kTekken}},
      {"gpt-4o", {kGpt4o}},
      {"llama4", {kGpt4o}},
      {"poro-chat", {kBloom}},
      {"bloom", {kBloom}},
      {"gpt3-finnish", {kBloom}},
      {"viking", {kBloom, R"(\p{N})"}},
      {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
  };
  auto it = table.find(pre);
  if (it == table.end()) return {};
  return it->second;
}

}  // namespace

std::vector<std::string> gguf_pre_tokenizer_regexes(std::string_view pre,
                                                    const std::string &origin) {
  auto v = lookup(pre);
  if (v.empty())
    throw Error(ErrorCode::kUnsupported,
                origin + ": tokenizer.ggml.pre " + std::string(pre) + " is not supported");
  return v;
}

}  // namespace keel::text
