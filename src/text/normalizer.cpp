#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "text/utf8.h"

namespace keel::text {

namespace {

// Characters that NFC leaves alone whatever surrounds them: no canonical
// decomposition, combining class 0, and never the second half of a composition.
// Conservative ranges cover Latin-1, CJK ideographs, kana, Hangul syllables,
// CJK punctuation and emoji, so most real text skips utf8proc entirely.
bool nfc_inert(char32_t c) {
  return c < 0x300 || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0x3000 && c <= 0x303F) || (c >= 0x3041 && c <= 0x3096) ||
         (c >= 0x30A0 && c <= 0x30FA) || (c >= 0xAC00 && c <= 0xD7A3 && (c - 0xAC00) % 28 != 0) ||
         (c >= 0x2010 && c <= 0x2027) || (c >= 0x1F300 && c <= 0x1FAFF);
}

class UnicodeNormalizer final : public NormalizerStep {
 public:
  explicit UnicodeNormalizer(UnicodeForm f) : form_(f) {}
  void apply(std::string &text) const override {
    bool ascii = true;
    for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;  // ASCII is invariant under every normalization form
    if (form_ == UnicodeForm::kNFC) {
      nfc_by_chunks(text);
      return;
    }
    text = normalize(text);
  }

 private:
  // NFC only changes runs of non-inert characters together with the starter just
  // before them; everything else is copied through.
  void nfc_by_chunks(std::string &text) const {
    std::string out;
    std::size_t copied = 0, prev_start = std::string::npos, i = 0;
    while (i < text.size()) {
      char32_t cp;
      std::size_t len;
      const bool ok = utf8_decode(text, i, cp, len);
      if (!ok || nfc_inert(cp)) {
        prev_start = i;
        i += len;
        continue;
      }
      const std::size_t cs =
          prev_start != std::string::npos && prev_start >= copied ? prev_start : i;
      std::size_t j = i + len;
      while (j < text.size()) {
        if (!utf8_decode(text, j, cp, len) || nfc_inert(cp)) break;
        j += len;
      }
      out.append(text, copied, cs - copied);
      out += normalize(std::string_view(text).substr(cs, j - cs));
      copied = j;
      prev_start = std::string::npos;
      i = j;
    }
    if (copied == 0) return;
    out.append(text, copied);
    text.swap(out);
  }

  std::string normalize(std::string_view text) const {
    int opts = UTF8PROC_STABLE;
    switch (form_) {
      case UnicodeForm::kNFC:
        opts |= UTF8PROC_COMPOSE;
        break;
      case UnicodeForm::kNFD:
        opts |= UTF8PROC_DECOMPOSE;
        break;
      case UnicodeForm::kNFKC:
        opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case UnicodeForm::kNFKD:
        opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t *out = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(text.data()),
                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                          static_cast<utf8proc_option_t>(opts));
    if (n < 0) return std::string(text);  // invalid input was sanitized before; keep as is
    std::string result(reinterpret_cast<char *>(out), static_cast<std::size_t>(n));
    std::free(out);
    return result;
  }

  UnicodeForm form_;
};

template <typename F>
void map_code_points(std::string &text, F &&f) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    std::size_t len;
    if (!utf8_decode(text, i, cp, len)) {
      out.append(text, i, len);
    } else {
      f(cp, out);
    }
    i += len;
  }
  text.swap(out);
}

class Lowercase final : public NormalizerStep {
 public:
  void apply(std::string &text) const override {
    map_code_points(text, [](char32_t cp, std::string &out) {
      utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    });
  }
};

class Prepend final : public NormalizerStep {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  void apply(std::string &text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public NormalizerStep {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void apply(std::string &text) const override {
    if (from_.empty() || text.find(from_) == std::string::npos) return;
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    std::size_t pos = 0;
    for (;;) {
      std::size_t hit = text.find(from_, pos);
      if (hit == std::string::npos) break;
      out.append(text, pos, hit - pos);
      out.append(to_);
      pos = hit + from_.size();
    }
    out.append(text, pos);
    text.swap(out);
  }

 private:
  std::string from_, to_;
};

class RegexReplace final : public NormalizerStep {
 public:
  RegexReplace(std::unique_ptr<Regex> re, std::string to)
      : re_(std::move(re)), to_(std::move(to)) {}
  void apply(std::string &text) const override {
    std::string out;
    std::size_t last = 0;
    re_->for_each_match(text, [&](std::size_t b, std::size_t e) {
      out.append(text, last, b - last);
      out.append(to_);
      last = e;
    });
    out.append(text, last);
    text.swap(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string to_;
};

bool is_ws(char32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' ||
         utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ZS;
}

class Strip final : public NormalizerStep {
 public:
  Strip(bool l, bool r) : left_(l), right_(r) {}
  void apply(std::string &text) const override {
    std::vector<std::pair<std::size_t, char32_t>> cps;  // (offset, code point)
    std::size_t i = 0;
    while (i < text.size()) {
      char32_t cp;
      std::size_t len;
      utf8_decode(text, i, cp, len);
      cps.push_back({i, cp});
      i += len;
    }
    std::size_t b = 0, e = cps.size();
    if (left_)
      while (b < e && is_ws(cps[b].second)) ++b;
    if (right_)
      while (e > b && is_ws(cps[e - 1].second)) --e;
    const std::size_t from = b < cps.size() ? cps[b].first : text.size();
    const std::size_t to = e < cps.size() ? cps[e].first : text.size();
    text = text.substr(from, to - from);
  }

 private:
  bool left_, right_;
};

class StripAccents final : public NormalizerStep {
 public:
  void apply(std::string &text) const override {
    map_code_points(text, [](char32_t cp, std::string &out) {
      if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN)
        utf8_append(out, cp);
    });
  }
};

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer final : public NormalizerStep {
 public:
  BertNormalizer(bool clean, bool cjk, bool accents, bool lower)
      : clean_(clean), cjk_(cjk), accents_(accents), lower_(lower) {}
  void apply(std::string &text) const override {
    map_code_points(text, [&](char32_t cp, std::string &out) {
      if (clean_) {
        if (cp == 0 || cp == 0xFFFD) return;
        const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
        const bool ws =
            cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cat == UTF8PROC_CATEGORY_ZS;
        if (ws) {
          out.push_back(' ');
          return;
        }
        if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF) return;
      }
      if (cjk_ && is_cjk(cp)) {
        out.push_back(' ');
        utf8_append(out, cp);
        out.push_back(' ');
        return;
      }
      utf8_append(out, cp);
    });
    if (accents_) {
      UnicodeNormalizer(UnicodeForm::kNFD).apply(text);
      StripAccents().apply(text);
    }
    if (lower_) Lowercase().apply(text);
  }

 private:
  bool clean_, cjk_, accents_, lower_;
};

class CollapseSpaces final : public NormalizerStep {
 public:
  void apply(std::string &text) const override {
    std::string out;
    out.reserve(text.size());
    bool prev_space = true;  // drops leading spaces
    for (char c : text) {
      if (c == ' ') {
        if (!prev_space) out.push_back(' ');
        prev_space = true;
      } else {
        out.push_back(c);
        prev_space = false;
      }
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    text.swap(out);
  }
};

}  // namespace

std::unique_ptr<NormalizerStep> make_unicode_normalizer(UnicodeForm form) {
  return std::make_unique<UnicodeNormalizer>(form);
}
std::unique_ptr<NormalizerStep> make_lowercase() { return std::make_unique<Lowercase>(); }
std::unique_ptr<NormalizerStep> make_prepend(std::string prefix) {
  return std::make_unique<Prepend>(std::move(prefix));
}
std::unique_ptr<NormalizerStep> make_replace(std::string literal, std::string content) {
  return std::make_unique<Replace>(std::move(literal), std::move(content));
}
std::unique_ptr<NormalizerStep> make_regex_replace(std::unique_ptr<Regex> regex,
                                                   std::string content) {
  return std::make_unique<RegexReplace>(std::move(regex), std::move(content));
}
std::unique_ptr<NormalizerStep> make_strip(bool left, bool right) {
  return std::make_unique<Strip>(left, right);
}
std::unique_ptr<NormalizerStep> make_strip_accents() { return std::make_unique<StripAccents>(); }
std::unique_ptr<NormalizerStep> make_bert_normalizer(bool clean_text, bool chinese_chars,
                                                     bool strip_accents, bool lowercase) {
  return std::make_unique<BertNormalizer>(clean_text, chinese_chars, strip_accents, lowercase);
}
std::unique_ptr<NormalizerStep> make_collapse_spaces() {
  return std::make_unique<CollapseSpaces>();
}

}  // namespace keel::text
