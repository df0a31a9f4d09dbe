#include "server/json_fields.h"

#include <gtest/gtest.h>

using namespace keel::server;

namespace {
std::string param_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const ApiErrorException &e) {
    EXPECT_EQ(e.error.status, 400);
    return e.error.param;
  }
  return "<no error>";
}
}  // namespace

TEST(JsonFields, Utf8Validation) {
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x82"));          // truncated
}

TEST(JsonFields, BodyErrorsNameTheBody) {
  EXPECT_EQ(param_of([] { parse_body("{"); }), "body");
  EXPECT_EQ(param_of([] { parse_body("[1]"); }), "body");
  EXPECT_EQ(param_of([] { parse_body("{\"a\":\"\xff\"}"); }), "body");
  EXPECT_EQ(param_of([] { parse_body(R"({"a":"\ud800"})"); }), "body");
  EXPECT_NO_THROW(parse_body(R"({"a":1})"));
}

TEST(JsonFields, TypedFieldsCheckTypeAndRange) {
  auto j =
      nlohmann::ordered_json::parse(R"({"i":5,"f":2.5,"s":"x","b":true,"big":1e300,"whole":3.0})");
  EXPECT_EQ(opt_int(j, "i", 0, 10), 5);
  EXPECT_EQ(opt_int(j, "whole", 0, 10), 3);
  EXPECT_EQ(param_of([&] { opt_int(j, "f", 0, 10); }), "f");
  EXPECT_EQ(param_of([&] { opt_int(j, "i", 6, 10); }), "i");
  EXPECT_EQ(param_of([&] { opt_int(j, "big", 0, 10); }), "big");
  EXPECT_EQ(param_of([&] { opt_number(j, "s", 0, 1); }), "s");
  EXPECT_EQ(param_of([&] { opt_bool(j, "i"); }), "i");
  EXPECT_EQ(param_of([&] { req_string(j, "missing"); }), "missing");
  EXPECT_FALSE(opt_int(j, "missing", 0, 1).has_value());
}

TEST(JsonFields, BodyLimitsAreA400NamingTheLimit) {
  auto message_of = [](const std::string &body) {
    try {
      parse_body(body);
    } catch (const ApiErrorException &e) {
      EXPECT_EQ(e.error.status, 400);
      EXPECT_EQ(e.error.param, "body");
      return e.error.message;
    }
    return std::string("<no error>");
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(message_of("{\"x\":" + deep + "}").find("nesting deeper than the limit of 128 levels"),
            std::string::npos);
  EXPECT_NE(message_of("{\"t\":1e400}").find("number out of range: 1e400"), std::string::npos);
  std::string keys = "{";
  for (int i = 0; i < 5000; ++i) keys += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  keys += "}";
  EXPECT_NE(message_of(keys).find("more than 4096 keys"), std::string::npos);
  EXPECT_EQ(message_of("{\"x\":" + std::string(127, '[') + std::string(127, ']') + "}"),
            "<no error>");
}
