#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace keel::text {

Regex::Regex(std::string_view pattern, const std::string &origin) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  auto *code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw Error(ErrorCode::kFormat, origin + ": regex does not compile at offset " +
                                        std::to_string(off) + ": " +
                                        reinterpret_cast<const char *>(buf));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code *>(code_)); }

Regex::Matcher::Matcher(const Regex &re) : re_(re) {
  md_ = pcre2_match_data_create_from_pattern(static_cast<pcre2_code *>(re.code_), nullptr);
  if (!md_) throw Error(ErrorCode::kResourceExhausted, "regex: out of memory");
}

Regex::Matcher::~Matcher() { pcre2_match_data_free(static_cast<pcre2_match_data *>(md_)); }

bool Regex::Matcher::next(std::string_view text, std::size_t from, std::size_t &b, std::size_t &e) {
  auto *code = static_cast<pcre2_code *>(re_.code_);
  auto *md = static_cast<pcre2_match_data *>(md_);
  const auto *subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = re_.jit_
               ? pcre2_jit_match(code, subject, text.size(), from, 0, md, nullptr)
               : pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    // Match limits (catastrophic backtracking) or JIT stack: treat the rest as unmatched
    // rather than crash; pre-tokenizers then pass the remainder through whole.
    return false;
  }
  const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
  b = ov[0];
  e = ov[1];
  return true;
}

}  // namespace keel::text
