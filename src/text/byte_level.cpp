#include "text/byte_level.h"

#include "text/utf8.h"

namespace keel::text {

namespace {
// Bytes that GPT-2 keeps as themselves: printable Latin-1 except the space.
bool kept(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }
}  // namespace

char32_t byte_to_unicode(unsigned char b) {
  if (kept(b)) return b;
  // The others get 256, 257, ... in byte order.
  unsigned n = 0;
  for (unsigned x = 0; x < b; ++x) n += kept(x) ? 0 : 1;
  return 256 + n;
}

std::optional<unsigned char> unicode_to_byte(char32_t cp) {
  if (cp < 256) {
    if (kept(static_cast<unsigned>(cp))) return static_cast<unsigned char>(cp);
    return std::nullopt;
  }
  if (cp >= 256 + 68) return std::nullopt;  // 68 bytes are remapped
  unsigned n = cp - 256;
  for (unsigned x = 0; x < 256; ++x) {
    if (!kept(x)) {
      if (n == 0) return static_cast<unsigned char>(x);
      --n;
    }
  }
  return std::nullopt;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    std::size_t len;
    if (!utf8_decode(text, i, cp, len)) return std::string(text);
    auto b = unicode_to_byte(cp);
    if (!b) return std::string(text);
    out.push_back(static_cast<char>(*b));
    i += len;
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, byte_to_unicode(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace keel::text
