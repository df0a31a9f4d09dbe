#include "core/bounded_json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace keel {
namespace {

using ojson = nlohmann::ordered_json;

std::string nested(std::size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

std::string object_with_keys(std::size_t n) {
  std::string s = "{";
  for (std::size_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  return s + "}";
}

TEST(BoundedJson, ParsesLikeNlohmannAndKeepsKeyOrder) {
  const std::string text =
      R"({"z":1,"a":[true,null,-2,18446744073709551615,1.5,"x"],"m":{"b":{},"a":[]}})";
  JsonParseFailure f;
  auto j = parse_bounded_json<ojson>(text, {}, &f);
  ASSERT_TRUE(j) << f.message;
  EXPECT_EQ(*j, ojson::parse(text));
  EXPECT_EQ(j->dump(), ojson::parse(text).dump());  // same key order
  auto u = parse_bounded_json<nlohmann::json>(text);
  ASSERT_TRUE(u);
  EXPECT_EQ(*u, nlohmann::json::parse(text));
  auto scalar = parse_bounded_json<ojson>(" 7 ");
  ASSERT_TRUE(scalar);
  EXPECT_EQ(*scalar, 7);
}

TEST(BoundedJson, RepeatedKeysKeepTheLastValueInTheFirstPlace) {
  // Both sides of the hash-index threshold.
  for (std::size_t n : {3u, 40u}) {
    std::string text = object_with_keys(n);
    text.pop_back();
    text += ",\"k1\":\"last\"}";
    auto j = parse_bounded_json<ojson>(text);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->size(), n);
    EXPECT_EQ((*j)["k1"], "last");
    EXPECT_EQ(j->begin().key(), "k0");
    EXPECT_EQ(std::next(j->begin()).key(), "k1");
    EXPECT_EQ(*j, ojson::parse(text));
  }
}

TEST(BoundedJson, DepthLimitHoldsAtTheBoundAndRefusesPastIt) {
  JsonLimits lim;
  lim.max_depth = 128;
  EXPECT_TRUE(parse_bounded_json<ojson>(nested(128), lim));
  JsonParseFailure f;
  EXPECT_FALSE(parse_bounded_json<ojson>(nested(129), lim, &f));
  EXPECT_EQ(f.kind, JsonParseFailure::Kind::kLimit);
  EXPECT_NE(f.message.find("128 levels"), std::string::npos) << f.message;
  // 1,000,000 deep, objects and arrays mixed: refused without recursion.
  std::string deep;
  for (int i = 0; i < 500000; ++i) deep += "{\"a\":[";
  EXPECT_FALSE(parse_bounded_json<ojson>(deep, lim, &f));
  EXPECT_EQ(f.kind, JsonParseFailure::Kind::kLimit);
}

TEST(BoundedJson, KeyArrayAndStringLimits) {
  JsonLimits lim;
  lim.max_object_keys = 100;
  lim.max_array_items = 10;
  lim.max_string_bytes = 8;
  JsonParseFailure f;
  EXPECT_TRUE(parse_bounded_json<ojson>(object_with_keys(100), lim));
  EXPECT_FALSE(parse_bounded_json<ojson>(object_with_keys(101), lim, &f));
  EXPECT_NE(f.message.find("more than 100 keys"), std::string::npos) << f.message;
  EXPECT_TRUE(parse_bounded_json<ojson>("[0,1,2,3,4,5,6,7,8,9]", lim));
  EXPECT_FALSE(parse_bounded_json<ojson>("[0,1,2,3,4,5,6,7,8,9,10]", lim, &f));
  EXPECT_NE(f.message.find("more than 10 items"), std::string::npos) << f.message;
  EXPECT_TRUE(parse_bounded_json<ojson>("[\"12345678\"]", lim));
  EXPECT_FALSE(parse_bounded_json<ojson>("[\"123456789\"]", lim, &f));
  EXPECT_NE(f.message.find("9 bytes"), std::string::npos) << f.message;
  EXPECT_FALSE(parse_bounded_json<ojson>("{\"123456789\":1}", lim, &f));
  EXPECT_EQ(f.kind, JsonParseFailure::Kind::kLimit);
}

TEST(BoundedJson, MalformedInputAndHugeNumbersAreSyntaxFailures) {
  JsonParseFailure f;
  for (const char *bad : {"", "{", "{\"a\":}", "[1,]", "{} x", "nul", "\"\\ud800\""}) {
    EXPECT_FALSE(parse_bounded_json<ojson>(bad, {}, &f)) << bad;
    EXPECT_EQ(f.kind, JsonParseFailure::Kind::kSyntax) << bad;
    EXPECT_FALSE(f.message.empty());
  }
  EXPECT_FALSE(parse_bounded_json<ojson>("{\"t\":1e400}", {}, &f));
  EXPECT_NE(f.message.find("number out of range: 1e400"), std::string::npos) << f.message;
  EXPECT_FALSE(parse_bounded_json<ojson>("[-1e400]", {}, &f));
  auto tiny = parse_bounded_json<ojson>("[1e-400, 123456789012345678901234567890]");
  ASSERT_TRUE(tiny);  // underflow is 0; a big integer becomes a double
}

TEST(BoundedJson, ManyKeysTakeLinearTime) {
  // 4,096 keys (the default limit) in each of 200 objects: ordered_json's own parse
  // scans every earlier key per key (8M compares per object); this stays linear.
  std::string text = "[";
  const std::string obj = object_with_keys(4096);
  for (int i = 0; i < 200; ++i) text += (i ? "," : "") + obj;
  text += "]";
  const auto t0 = std::chrono::steady_clock::now();
  auto j = parse_bounded_json<ojson>(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(j);
  EXPECT_EQ((*j)[199].size(), 4096u);
  EXPECT_LT(s, 5.0) << "parse of " << text.size() << " bytes took " << s << " s";
}

}  // namespace
}  // namespace keel
