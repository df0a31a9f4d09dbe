// Normalizers: text -> text before pre-tokenization (HF tokenizers' "normalizer").
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/regex.h"

namespace keel::text {

class NormalizerStep {
 public:
  virtual ~NormalizerStep() = default;
  virtual void apply(std::string &text) const = 0;
};

enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };

std::unique_ptr<NormalizerStep> make_unicode_normalizer(UnicodeForm form);
std::unique_ptr<NormalizerStep> make_lowercase();
std::unique_ptr<NormalizerStep> make_prepend(std::string prefix);
// Replaces a literal string, or (regex != nullptr) every match of a regex.
std::unique_ptr<NormalizerStep> make_replace(std::string literal, std::string content);
std::unique_ptr<NormalizerStep> make_regex_replace(std::unique_ptr<Regex> regex,
                                                   std::string content);
std::unique_ptr<NormalizerStep> make_strip(bool left, bool right);
std::unique_ptr<NormalizerStep> make_strip_accents();
// BERT: control characters removed, whitespace to spaces, CJK characters padded
// with spaces, optional accent stripping and lowercasing.
std::unique_ptr<NormalizerStep> make_bert_normalizer(bool clean_text, bool chinese_chars,
                                                     bool strip_accents, bool lowercase);
// SentencePiece's remove_extra_whitespaces: trims and collapses runs of spaces.
std::unique_ptr<NormalizerStep> make_collapse_spaces();

class Normalizer {
 public:
  bool empty() const { return steps_.empty(); }
  void add(std::unique_ptr<NormalizerStep> step) { steps_.push_back(std::move(step)); }
  std::string apply(std::string_view text) const {
    std::string s(text);
    for (const auto &step : steps_) step->apply(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<NormalizerStep>> steps_;
};

}  // namespace keel::text
