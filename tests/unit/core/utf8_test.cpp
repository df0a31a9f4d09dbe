// The one UTF-8 encoder at each length boundary, against the compiler's own u8 literals.
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace keel {
namespace {

std::string encoded(char32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

std::string bytes(const char8_t *u8) { return reinterpret_cast<const char *>(u8); }

TEST(Utf8Append, EncodesEachLengthBoundary) {
  EXPECT_EQ(encoded(U'\x41'), "A");
  EXPECT_EQ(encoded(U'\x7F'), "\x7F");
  EXPECT_EQ(encoded(U'\x80'), bytes(u8"\u0080"));
  EXPECT_EQ(encoded(U'\x7FF'), bytes(u8"\u07FF"));
  EXPECT_EQ(encoded(U'\x800'), bytes(u8"\u0800"));
  EXPECT_EQ(encoded(U'\xFFFD'), bytes(u8"\uFFFD"));
  EXPECT_EQ(encoded(U'\x10000'), bytes(u8"\U00010000"));
  EXPECT_EQ(encoded(U'\x10FFFF'), bytes(u8"\U0010FFFF"));
  EXPECT_EQ(encoded(U'\x1F600').size(), 4u);
}

}  // namespace
}  // namespace keel
