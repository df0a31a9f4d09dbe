#include "text/incremental_decoder.h"

#include <span>

#include "text/tokenizer.h"
#include "text/utf8.h"

namespace keel {

namespace {
// A UTF-8 character spans at most 4 byte tokens, after tokens that decode to nothing
// on their own (a leading "▁", skipped special tokens).
constexpr std::size_t kMaxPendingTokens = 8;
}  // namespace

std::string IncrementalDecoder::window(std::size_t begin, std::size_t end) const {
  return tok_.decode(std::span<const TokenId>(ids_.data() + begin, end - begin), skip_special_);
}

std::string IncrementalDecoder::add(TokenId id) {
  ids_.push_back(id);
  const std::string prefix = window(prefix_offset_, read_offset_);
  std::string text = window(prefix_offset_, ids_.size());
  const bool incomplete =
      text.ends_with(text::kReplacementChar) && ids_.size() - read_offset_ < kMaxPendingTokens;
  if (text.size() <= prefix.size() || incomplete) return {};
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return text.substr(prefix.size());
}

std::string IncrementalDecoder::flush() {
  if (read_offset_ >= ids_.size()) return {};
  const std::string prefix = window(prefix_offset_, read_offset_);
  const std::string text = window(prefix_offset_, ids_.size());
  prefix_offset_ = read_offset_ = ids_.size();
  if (text.size() <= prefix.size()) return {};
  return text.substr(prefix.size());
}

}  // namespace keel
