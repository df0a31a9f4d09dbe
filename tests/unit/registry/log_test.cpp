#include "registry/log.h"

#include <gtest/gtest.h>

using namespace keel;

TEST(Logger, LevelsParseAndFilter) {
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_FALSE(parse_log_level("loud").has_value());
  EXPECT_STREQ(log_level_name(LogLevel::kInfo), "info");
  Logger warn(LogLevel::kWarn);
  EXPECT_TRUE(warn.enabled(LogLevel::kError));
  EXPECT_TRUE(warn.enabled(LogLevel::kWarn));
  EXPECT_FALSE(warn.enabled(LogLevel::kInfo));
  testing::internal::CaptureStderr();
  warn.log(LogLevel::kInfo, "hidden %d", 1);
  warn.log(LogLevel::kError, "shown %d", 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "keel serve: shown 2\n");
}

TEST(Logger, ControlCharactersAreEscapedSoALineStaysOneLine) {
  EXPECT_EQ(escape_log_text("a\nb\rc\td\x1b[31m\x7f\x01 ok \xc3\xa9"),
            "a\\nb\\rc\\td\\x1b[31m\\x7f\\x01 ok \xc3\xa9");
  Logger log(LogLevel::kInfo);
  testing::internal::CaptureStderr();
  log.log(LogLevel::kInfo, "model=%s status=404", "x\nkeel serve: FORGED");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "keel serve: model=x\\nkeel serve: FORGED status=404\n");
}
