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
      {"deepseek-llm",
       {"[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-"
        "Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-"
        "ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-"
        "ﬆﬓ-ﬗＡ-Ｚａ-ｚ"
        "\U00010400-\U0001044f𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"}},
      {"deepseek-coder",
       {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}},
      {"deepseek-v3",
       {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
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
