// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for pre-tokenizer splits
// and normalizer replacements. Thread-safe: each search makes its own match data.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace keel::text {

class Regex {
 public:
  // Throws Error(kFormat, "<origin>: regex ...") when the pattern does not compile.
  Regex(std::string_view pattern, const std::string &origin);
  ~Regex();
  Regex(const Regex &) = delete;
  Regex &operator=(const Regex &) = delete;

  const std::string &pattern() const { return pattern_; }

  // Calls on_match(begin, end) for every non-overlapping match, left to right.
  // `text` must be valid UTF-8. Empty matches advance by one character.
  template <typename F>
  void for_each_match(std::string_view text, F &&on_match) const {
    Matcher m(*this);
    std::size_t pos = 0;
    std::size_t b, e;
    while (pos <= text.size() && m.next(text, pos, b, e)) {
      if (e > b) on_match(b, e);
      if (e == b) {
        // Empty match: step over one UTF-8 character.
        e = b + 1;
        while (e < text.size() && (static_cast<unsigned char>(text[e]) & 0xC0) == 0x80) ++e;
      }
      pos = e;
    }
  }

 private:
  class Matcher {
   public:
    explicit Matcher(const Regex &re);
    ~Matcher();
    bool next(std::string_view text, std::size_t from, std::size_t &b, std::size_t &e);

   private:
    const Regex &re_;
    void *md_;  // pcre2_match_data*
  };

  std::string pattern_;
  void *code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

}  // namespace keel::text
