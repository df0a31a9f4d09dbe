// JSON Schema to grammar, one test per feature: documents that validate are accepted
// whole, documents that do not are rejected, unsupported keywords name their path.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <chrono>

#include "grammar_test_util.h"

namespace keel::grammar::test {
namespace {

using K = ConstraintKind;

std::shared_ptr<const CompiledGrammar> schema(std::string_view text) {
  return compile(K::kJsonSchema, text);
}
std::string schema_error(std::string_view text) { return compile_error(K::kJsonSchema, text); }

TEST(JsonSchema, PrimitiveTypes) {
  auto s = schema(R"({"type": "string"})");
  EXPECT_TRUE(matches(s, R"("hello")"));
  EXPECT_TRUE(matches(s, R"("esc \" \\ \n \u00e9 é")"));
  EXPECT_FALSE(matches(s, R"("bad \q")"));
  EXPECT_FALSE(matches(s, "\"raw\nnewline\""));
  EXPECT_FALSE(matches(s, "3"));
  auto n = schema(R"({"type": "number"})");
  for (const char *ok : {"0", "-1.5", "3e10", "2.25E-3", "123"}) EXPECT_TRUE(matches(n, ok)) << ok;
  for (const char *bad : {"01", "1.", ".5", "+1", "\"1\"", "-"})
    EXPECT_FALSE(matches(n, bad)) << bad;
  auto i = schema(R"({"type": "integer"})");
  EXPECT_TRUE(matches(i, "-42"));
  EXPECT_FALSE(matches(i, "4.2"));
  EXPECT_TRUE(matches(schema(R"({"type": "boolean"})"), "false"));
  EXPECT_FALSE(matches(schema(R"({"type": "boolean"})"), "null"));
  EXPECT_TRUE(matches(schema(R"({"type": "null"})"), "null"));
  auto multi = schema(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(matches(multi, "null"));
  EXPECT_TRUE(matches(multi, R"("x")"));
  EXPECT_FALSE(matches(multi, "1"));
}

TEST(JsonSchema, StrictObjectWithRequiredProperties) {
  auto s = schema(R"({"type": "object", "properties": {"name": {"type": "string"},
                     "age": {"type": "integer"}}, "required": ["name", "age"],
                     "additionalProperties": false})");
  EXPECT_TRUE(matches(s, R"({"name":"Ada","age":36})"));
  EXPECT_TRUE(matches(s, "{\n  \"name\": \"Ada\",\n  \"age\": 36\n}"));
  EXPECT_FALSE(matches(s, R"({"name":"Ada"})"));                 // age is required
  EXPECT_FALSE(matches(s, R"({"age":36,"name":"Ada"})"));        // schema order
  EXPECT_FALSE(matches(s, R"({"name":"Ada","age":36,"x":1})"));  // no additional
  EXPECT_FALSE(matches(s, R"({"name":"Ada","age":"36"})"));
}

TEST(JsonSchema, OptionalPropertiesMayBeOmitted) {
  auto s = schema(R"({"type": "object", "properties": {"a": {"type": "integer"},
                     "b": {"type": "integer"}, "c": {"type": "integer"}}, "required": ["b"]})");
  for (const char *ok :
       {R"({"b":1})", R"({"a":0,"b":1})", R"({"b":1,"c":2})", R"({"a":0,"b":1,"c":2})"})
    EXPECT_TRUE(matches(s, ok)) << ok;
  for (const char *bad : {R"({})", R"({"a":0})", R"({"a":0,"c":2})", R"({,"b":1})", R"({"b":1,})"})
    EXPECT_FALSE(matches(s, bad)) << bad;
  auto none = schema(R"({"type": "object", "properties": {"a": {"type": "integer"},
                        "b": {"type": "integer"}}})");
  EXPECT_TRUE(matches(none, "{}"));
  EXPECT_TRUE(matches(none, R"({"b":2})"));
  EXPECT_FALSE(matches(none, R"({"b":2,"a":1})"));
}

TEST(JsonSchema, AdditionalPropertiesAsMapsAndFreeObjects) {
  auto map = schema(R"({"type": "object", "additionalProperties": {"type": "number"}})");
  EXPECT_TRUE(matches(map, R"({"x": 1, "y": 2.5})"));
  EXPECT_TRUE(matches(map, "{}"));
  EXPECT_FALSE(matches(map, R"({"x": "1"})"));
  auto any = schema(R"({"type": "object"})");
  EXPECT_TRUE(matches(any, R"({"x": [1, {"y": null}], "z": "w"})"));
  EXPECT_FALSE(matches(any, "[1]"));
  auto mixed = schema(R"({"type": "object", "properties": {"id": {"type": "integer"}},
                         "required": ["id"], "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(matches(mixed, R"({"id": 1, "a": "x", "b": "y"})"));
  EXPECT_FALSE(matches(mixed, R"({"id": 1, "a": 2})"));
}

TEST(JsonSchema, EnumAndConst) {
  auto e = schema(R"({"enum": ["red", "green", 3, null, {"a": 1}]})");
  for (const char *ok : {R"("red")", R"("green")", "3", "null", R"({"a":1})"})
    EXPECT_TRUE(matches(e, ok)) << ok;
  EXPECT_FALSE(matches(e, R"("blue")"));
  EXPECT_FALSE(matches(e, R"("re")"));
  auto c = schema(R"({"const": "fixed"})");
  EXPECT_TRUE(matches(c, R"("fixed")"));
  EXPECT_FALSE(matches(c, R"("fixe")"));
  EXPECT_NE(schema_error(R"({"properties": {"x": {"enum": []}}})").find("properties.x.enum"),
            std::string::npos);
}

TEST(JsonSchema, ArraysWithItemBounds) {
  auto s =
      schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(matches(s, "[1]"));
  EXPECT_TRUE(matches(s, "[1, 2, 3]"));
  EXPECT_FALSE(matches(s, "[]"));
  EXPECT_FALSE(matches(s, "[1,2,3,4]"));
  EXPECT_FALSE(matches(s, "[1,]"));
  auto free = schema(R"({"type": "array", "items": {"type": "string"}})");
  EXPECT_TRUE(matches(free, "[]"));
  EXPECT_TRUE(matches(free, R"(["a","b","c","d","e"])"));
  auto big = schema(R"({"type": "array", "items": {"type": "object", "properties":
                       {"v": {"type": "integer"}}, "required": ["v"]}, "minItems": 2, "maxItems": 500})");
  EXPECT_FALSE(matches(big, R"([{"v":1}])"));
  std::string doc = "[";
  for (int i = 0; i < 500; ++i)
    doc += (i ? "," : "") + std::string(R"({"v":)") + std::to_string(i) + "}";
  EXPECT_TRUE(matches(big, doc + "]"));
  EXPECT_FALSE(matches(big, doc + R"(,{"v":1}])"));
  auto tuple =
      schema(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})");
  EXPECT_TRUE(matches(tuple, R"(["a", 1])"));
  EXPECT_TRUE(matches(tuple, "[]"));
  EXPECT_FALSE(matches(tuple, R"([1, "a"])"));
}

TEST(JsonSchema, NestedObjectsAndArrays) {
  auto s = schema(R"({"type": "object", "properties": {
      "user": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["tags"], "additionalProperties": false}},
      "required": ["user"], "additionalProperties": false})");
  EXPECT_TRUE(matches(s, R"({"user": {"tags": ["a", "b"]}})"));
  EXPECT_FALSE(matches(s, R"({"user": {"tags": [1]}})"));
  EXPECT_FALSE(matches(s, R"({"user": {}})"));
}

TEST(JsonSchema, DefsRefsAndRecursion) {
  auto s = schema(R"({"$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value", "children"], "additionalProperties": false}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(matches(s, R"({"value":1,"children":[{"value":2,"children":[]}]})"));
  EXPECT_FALSE(matches(s, R"({"value":1,"children":[{"value":2}]})"));
  auto root_ref = schema(
      R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
                           "required": ["next"]})");
  EXPECT_TRUE(matches(root_ref, R"({"next":{"next":null}})"));
  EXPECT_NE(schema_error(R"({"$ref": "#/$defs/missing"})").find("$ref"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref": "http://x/y.json"})").find("local"), std::string::npos);
}

TEST(JsonSchema, AnyOfAndNullable) {
  auto s = schema(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]})");
  EXPECT_TRUE(matches(s, "12"));
  EXPECT_TRUE(matches(s, R"("ab")"));
  EXPECT_FALSE(matches(s, R"("abc")"));
  auto n = schema(R"({"type": "string", "nullable": true})");
  EXPECT_TRUE(matches(n, "null"));
}

// A \u escape names a scalar value: a surrogate pair is one character, a lone half is
// refused (strict parsers reject it; a forced tool call holding one went out as text).
TEST(JsonSchema, StringEscapesNameScalarValues) {
  auto s = schema(R"({"type": "string"})");
  EXPECT_TRUE(matches(s, R"("\u0041\uD7FF\ue000\uFFFF\u00e9")"));
  EXPECT_TRUE(matches(s, R"("\ud83d\ude00 \uDBFF\uDFFF")"));
  EXPECT_FALSE(matches(s, R"("\udc95")"));
  EXPECT_FALSE(matches(s, R"("\ud83d")"));
  EXPECT_FALSE(matches(s, R"("\ud83dx")"));
  EXPECT_FALSE(matches(s, R"("\ud83d\u0041")"));
  auto one = schema(R"({"type": "string", "maxLength": 1})");
  EXPECT_TRUE(matches(one, R"("\ud83d\ude00")"));
}

TEST(JsonSchema, StringLengthsPatternsAndFormats) {
  auto len = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(matches(len, R"("a")"));
  EXPECT_TRUE(matches(len, R"("ab")"));
  EXPECT_TRUE(matches(len, R"("é\n")"));  // characters, escapes count as one
  EXPECT_FALSE(matches(len, R"("abcd")"));
  auto zip = schema(R"({"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"})");
  EXPECT_TRUE(matches(zip, R"("12345")"));
  EXPECT_TRUE(matches(zip, R"("12345-6789")"));
  EXPECT_FALSE(matches(zip, R"("1234")"));
  auto contains = schema(R"({"type": "string", "pattern": "ab"})");  // unanchored: a search
  EXPECT_TRUE(matches(contains, R"("xxabyy")"));
  EXPECT_FALSE(matches(contains, R"("xxa")"));
  auto quote = schema(R"({"type": "string", "pattern": "^a\"b$"})");
  EXPECT_TRUE(matches(quote, R"("a\"b")"));  // a quote in a pattern is escaped in JSON
  auto date = schema(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(matches(date, R"("2026-12-03")"));
  EXPECT_FALSE(matches(date, R"("2026-13-03")"));
  auto uuid = schema(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(matches(uuid, R"("123e4567")"));
  auto dt = schema(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(matches(dt, R"("2026-12-03T08:12:00Z")"));
  EXPECT_TRUE(matches(schema(R"({"type": "string", "format": "unknown-format"})"), R"("x")"));
  EXPECT_NE(schema_error(R"({"properties": {"z": {"type": "string", "pattern": "(?<=a)b"}}})")
                .find("properties.z.pattern"),
            std::string::npos);
}

TEST(JsonSchema, IntegerBounds) {
  auto s = schema(R"({"type": "integer", "minimum": -5, "maximum": 120})");
  for (int v = -20; v <= 200; ++v)
    EXPECT_EQ(matches(s, std::to_string(v)), v >= -5 && v <= 120) << v;
  EXPECT_FALSE(matches(s, "-0"));
  EXPECT_FALSE(matches(s, "007"));
  auto ex = schema(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000})");
  EXPECT_FALSE(matches(ex, "0"));
  EXPECT_TRUE(matches(ex, "1"));
  EXPECT_TRUE(matches(ex, "999"));
  EXPECT_FALSE(matches(ex, "1000"));
  auto open = schema(R"({"type": "integer", "minimum": 18})");
  EXPECT_FALSE(matches(open, "17"));
  EXPECT_TRUE(matches(open, "18"));
  EXPECT_TRUE(matches(open, "123456789"));
  auto nonneg = schema(R"({"type": "number", "minimum": 0})");
  EXPECT_TRUE(matches(nonneg, "2.5"));
  EXPECT_FALSE(matches(nonneg, "-2.5"));
}

TEST(JsonSchema, ErrorsNameThePathInsideTheSchema) {
  EXPECT_NE(schema_error(R"({"type": "object", "properties": {"age": {"type": "number",
                         "minimum": 0.25, "maximum": 0.75}}})")
                .find("properties.age.minimum"),
            std::string::npos);
  EXPECT_NE(
      schema_error(
          R"({"properties": {"a": {"type": "array", "items": {"type": "integer", "multipleOf": 2}}}})")
          .find("properties.a.items.multipleOf"),
      std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "strin"})").find("type"), std::string::npos);
  EXPECT_NE(schema_error(R"({"anyOf": [{"type": "string"}, {"not": {}}]})").find("anyOf.1.not"),
            std::string::npos);
  EXPECT_NE(schema_error("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("maxItems"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"required": ["x"], "properties": {"y": {}},
                              "additionalProperties": false})")
                .find("required"),
            std::string::npos);
  EXPECT_NE(compile_error(K::kJsonSchema, R"({"type": 5})", "response_format.json_schema.schema")
                .find("response_format.json_schema.schema.type"),
            std::string::npos);
}

TEST(JsonSchema, HostileSchemasAreBounded) {
  // Deep nesting: refused past the depth limit, quickly.
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += R"({"type": "array", "items": )";
  deep += R"({"type": "integer"})" + std::string(1000, '}');
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(schema_error(deep).find("nested deeper"), std::string::npos);
  // A large enum compiles into a trie; a huge one is refused at the state limit.
  auto make_enum = [](int n) {
    std::string e = R"({"enum": [)";
    for (int i = 0; i < n; ++i)
      e += (i ? "," : "") + std::string("\"v") + std::to_string(std::int64_t(i) * 7919) + "\"";
    return e + "]}";
  };
  auto g = schema(make_enum(20000));
  EXPECT_TRUE(matches(g, "\"v" + std::to_string(19999 * 7919) + "\""));
  EXPECT_FALSE(matches(g, "\"v" + std::to_string(20000 * 7919) + "\""));
  EXPECT_NE(schema_error(make_enum(300000)).find("too large"), std::string::npos);
  // Self-reference without progress is left recursion.
  EXPECT_NE(schema_error(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"), "");
  EXPECT_NE(schema_error(R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})").find("left recursion"),
            std::string::npos);
  // Many copies of a large item: counted repeats are rules of blocks (grammar.cpp), so
  // this compiles in bounded time and memory (or is refused), never blows up.
  (void)schema_error(
      R"({"type": "array", "items": {"type": "string", "maxLength": 5000}, "minItems": 5000})");
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 10.0);
}

TEST(JsonSchema, JsonObjectMode) {
  auto g = compile(K::kJsonObject, "");
  EXPECT_TRUE(matches(g, R"({"a": [true, false, null, -0.5e3, "s"]})"));
  EXPECT_FALSE(matches(g, R"("just a string")"));
}

}  // namespace
}  // namespace keel::grammar::test
