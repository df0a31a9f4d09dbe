// Pre-tokenizers: split normalized text into words that the model encodes one by
// one (HF tokenizers' "pre_tokenizer"). Steps form a chain: each word a step emits
// goes through the next step. Byte-level steps do not remap bytes to the "Ġ"
// alphabet: byte-level BPE models hold their vocabulary as raw bytes instead.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/function_ref.h"
#include "text/regex.h"

namespace keel::text {

using WordSink = FunctionRef<void(std::string_view)>;

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // at_start: the text begins at offset 0 of the original input (Metaspace "first").
  virtual void split(std::string_view text, bool at_start, WordSink sink) const = 0;
};

// The GPT-2 pattern ByteLevel(use_regex=true) applies.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::unique_ptr<PreTokenizerStep> make_split(std::unique_ptr<Regex> regex, SplitBehavior behavior,
                                             bool invert);
std::unique_ptr<PreTokenizerStep> make_byte_level(bool add_prefix_space,
                                                  std::unique_ptr<Regex> regex /* may be null */);
// prepend: 0 never, 1 first, 2 always.
std::unique_ptr<PreTokenizerStep> make_metaspace(std::string replacement, int prepend, bool split);

class PreTokenizer {
 public:
  bool empty() const { return steps_.empty(); }
  void add(std::unique_ptr<PreTokenizerStep> s) { steps_.push_back(std::move(s)); }
  void split(std::string_view text, bool at_start, WordSink sink) const {
    run(0, text, at_start, sink);
  }

 private:
  void run(std::size_t i, std::string_view text, bool at_start, WordSink sink) const {
    if (i == steps_.size()) {
      if (!text.empty()) sink(text);
      return;
    }
    steps_[i]->split(text, at_start, [&](std::string_view w) { run(i + 1, w, at_start, sink); });
  }
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
};

}  // namespace keel::text
