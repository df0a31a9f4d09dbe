// JSON Schema numeric keywords and the keywords keel refuses (issue 17): numbers between
// any bounds (each inclusive or exclusive) match exactly the plain decimals inside them,
// checked by brute force over every number with up to two fraction digits in [-13, 13];
// multipleOf as far as it is supported; not / if-then-else / uniqueItems refused with a
// 400 naming the path; a pattern with min/maxLength kept when the lengths are implied.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "grammar_test_util.h"

namespace keel::grammar::test {
namespace {

using K = ConstraintKind;

std::shared_ptr<const CompiledGrammar> schema(std::string_view text) {
  return compile(K::kJsonSchema, text);
}
std::string schema_error(std::string_view text) { return compile_error(K::kJsonSchema, text); }

// Every plain decimal with an integer part in [-13, 13] and 0-2 fraction digits, and -0.
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  for (int i = -13; i <= 13; ++i) {
    const std::string ip = std::to_string(i);
    out.push_back(ip);
    for (int f = 0; f < 10; ++f) out.push_back(ip + "." + std::to_string(f));
    for (int f = 0; f < 100; ++f) out.push_back(ip + "." + (f < 10 ? "0" : "") + std::to_string(f));
  }
  for (const char *neg0 : {"-0", "-0.5", "-0.25", "-0.05", "-0.0"}) out.push_back(neg0);
  return out;
}

struct Bounds {
  const char *schema;
  double lo, hi;  // NAN: none
  bool lo_ex, hi_ex;
};

TEST(JsonSchemaNumbers, BoundsAdmitExactlyTheNumbersInside) {
  const double none = NAN;
  const std::vector<Bounds> cases = {
      {R"("minimum": 2.5)", 2.5, none, false, false},
      {R"("maximum": 2.5)", none, 2.5, false, false},
      {R"("exclusiveMinimum": 2.5)", 2.5, none, true, false},
      {R"("exclusiveMaximum": -2.5)", none, -2.5, false, true},
      {R"("minimum": -3, "maximum": 7.25)", -3, 7.25, false, false},
      {R"("exclusiveMinimum": -0.75, "exclusiveMaximum": 4)", -0.75, 4, true, true},
      {R"("minimum": 0, "exclusiveMaximum": 1)", 0, 1, false, true},
      {R"("minimum": -10.5, "maximum": -2.25)", -10.5, -2.25, false, false},
      {R"("exclusiveMaximum": 0)", none, 0, false, true},
      {R"("exclusiveMinimum": 0)", 0, none, true, false},
      {R"("minimum": 1.05, "maximum": 3.5)", 1.05, 3.5, false, false},
      {R"("minimum": 0, "maximum": 0.5)", 0, 0.5, false, false},
      {R"("minimum": -0.5, "maximum": 0.5)", -0.5, 0.5, false, false},
      {R"("minimum": 12, "maximum": 12)", 12, 12, false, false},
      {R"("minimum": 3, "exclusiveMinimum": 3)", 3, none, true, false},  // the tighter
      {R"("minimum": 5, "exclusiveMinimum": true, "maximum": 9)", 5, 9, true, false},  // draft 4
  };
  const auto nums = candidates();
  for (const Bounds &c : cases) {
    const std::string text = std::string(R"({"type": "number", )") + c.schema + "}";
    ASSERT_EQ(schema_error(text), "") << text;
    auto g = schema(text);
    for (const std::string &n : nums) {
      const double v = std::strtod(n.c_str(), nullptr);
      bool inside = true;
      if (!std::isnan(c.lo)) inside &= c.lo_ex ? v > c.lo : v >= c.lo;
      if (!std::isnan(c.hi)) inside &= c.hi_ex ? v < c.hi : v <= c.hi;
      // A negative zero ("-0", "-0.0") may be left out where 0 is allowed: never produced.
      if (v == 0 && n[0] == '-' && !matches(g, n)) continue;
      ASSERT_EQ(matches(g, n), inside) << c.schema << " on " << n;
    }
    EXPECT_FALSE(matches(g, "1e1")) << c.schema;  // bounded numbers have no exponent
    EXPECT_FALSE(matches(g, "01")) << c.schema;
  }
  // Past two fraction digits: the comparison runs digit by digit.
  auto g = schema(R"({"type": "number", "minimum": 0.125, "exclusiveMaximum": 1.9})");
  EXPECT_FALSE(matches(g, "0.1249999"));
  EXPECT_TRUE(matches(g, "0.125"));
  EXPECT_TRUE(matches(g, "0.12500001"));
  EXPECT_TRUE(matches(g, "1.8999999"));
  EXPECT_FALSE(matches(g, "1.9000"));
  EXPECT_TRUE(matches(g, "0.9"));
  EXPECT_FALSE(matches(g, "-0.2"));
}

TEST(JsonSchemaNumbers, BoundsTheGrammarCannotExpressAre400s) {
  EXPECT_NE(schema_error(R"({"properties": {"p": {"type": "number", "minimum": 0.25,
                         "maximum": 0.75}}})")
                .find("properties.p.minimum"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 0.5})"), "");
  EXPECT_NE(schema_error(R"({"type": "number", "minimum": 1e-20})").find("minimum"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "maximum": 1e300})").find("maximum"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "minimum": 2, "maximum": 1})").find("maximum"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "minimum": 1, "exclusiveMaximum": 1})"), "");
  EXPECT_NE(schema_error(R"({"type": "number", "minimum": "1"})").find("minimum"),
            std::string::npos);
}

TEST(JsonSchemaNumbers, MultipleOf) {
  auto one = schema(R"({"type": "number", "multipleOf": 1, "minimum": -2, "maximum": 30})");
  EXPECT_TRUE(matches(one, "30"));
  EXPECT_TRUE(matches(one, "-2"));
  EXPECT_FALSE(matches(one, "3.5"));
  EXPECT_FALSE(matches(one, "31"));
  auto cents = schema(R"({"type": "number", "multipleOf": 0.01})");
  EXPECT_TRUE(matches(cents, "19.99"));
  EXPECT_TRUE(matches(cents, "-3.5"));
  EXPECT_TRUE(matches(cents, "7"));
  EXPECT_FALSE(matches(cents, "0.001"));
  EXPECT_TRUE(matches(schema(R"({"type": "integer", "multipleOf": 1})"), "-12"));
  EXPECT_NE(schema_error(R"({"properties": {"n": {"type": "integer", "multipleOf": 3}}})")
                .find("properties.n.multipleOf"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "multipleOf": 0.5})").find("multipleOf"),
            std::string::npos);
  EXPECT_NE(
      schema_error(R"({"type": "number", "multipleOf": 0.1, "maximum": 3})").find("multipleOf"),
      std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "multipleOf": 0})").find("multipleOf"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "number", "multipleOf": -1})").find("multipleOf"),
            std::string::npos);
}

TEST(JsonSchemaNumbers, RefusedKeywordsNameTheirPath) {
  EXPECT_NE(schema_error(R"({"properties": {"a": {"not": {"type": "string"}}}})")
                .find("properties.a.not"),
            std::string::npos);
  for (const char *k : {"if", "then", "else"}) {
    const std::string s = std::string(R"({"type": "object", "properties": {"x": {"items": {")") +
                          k + R"(": {"type": "integer"}}}}})";
    EXPECT_NE(schema_error(s).find(std::string("properties.x.items.") + k), std::string::npos) << s;
  }
  EXPECT_NE(schema_error(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})")
                .find("uniqueItems"),
            std::string::npos);
  EXPECT_TRUE(matches(schema(R"({"type": "array", "uniqueItems": false})"), "[1,1]"));
  EXPECT_NE(schema_error(R"({"properties": {"z": {"type": "string", "pattern": "^a+$",
                         "maxLength": 4}}})")
                .find("properties.z.pattern"),
            std::string::npos);
}

// A pattern with minLength / maxLength: kept when every match of the pattern already
// has a length within them, else a 400 naming the pattern (and its lengths).
TEST(JsonSchemaNumbers, PatternWithLengths) {
  auto zip = schema(R"({"type": "string", "pattern": "^[0-9]{5}$", "minLength": 5,
                     "maxLength": 5})");
  EXPECT_TRUE(matches(zip, R"("12345")"));
  EXPECT_FALSE(matches(zip, R"("1234")"));
  auto alt = schema(R"({"type": "string", "pattern": "^(ab|c)\"?$", "minLength": 1,
                     "maxLength": 3})");
  EXPECT_TRUE(matches(alt, R"("ab\"")"));  // an escaped quote is one character
  EXPECT_TRUE(matches(alt, R"("c")"));
  auto open = schema(R"({"type": "string", "pattern": "ab", "minLength": 2})");
  EXPECT_TRUE(matches(open, R"("xxaby")"));
  const std::string err =
      schema_error(R"({"properties": {"w": {"type": "string", "pattern": "^[a-z]{2,4}$",
                   "maxLength": 3}}})");
  EXPECT_NE(err.find("properties.w.pattern"), std::string::npos) << err;
  EXPECT_NE(err.find("2 to 4"), std::string::npos) << err;
  EXPECT_NE(schema_error(R"({"type": "string", "pattern": "^a{2}$", "minLength": 3})"), "");
  EXPECT_NE(schema_error(R"({"type": "string", "pattern": "ab", "maxLength": 10})"), "");
  // Nested counted repeats: refused (the state limit or the lengths), quickly.
  EXPECT_NE(schema_error(R"({"type": "string", "pattern": "^((((a{1000}){1000}){1000}){1000})$",
                         "maxLength": 5})"),
            "");
}

}  // namespace
}  // namespace keel::grammar::test
