// The JSON Schema side of issue 28: integer bounds of any size (zod 4's +-(2^53 - 1),
// pydantic 2's exclusive bounds), bounded whitespace and its opt-outs, keys not listed
// (allowed when additionalProperties is omitted, never a listed key's name), a forced
// tool's declared parameters only, Python's json.dumps form, and a MaskBench case walked
// through the token masks of a small vocabulary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "grammar/json_schema.h"
#include "grammar/maskbench_case.h"
#include "grammar/python_json.h"
#include "grammar/tagged_json.h"
#include "grammar_test_util.h"

namespace keel::grammar::test {
namespace {

using K = ConstraintKind;

std::shared_ptr<const CompiledGrammar> schema(std::string_view text) {
  return compile(K::kJsonSchema, text);
}

TEST(JsonSchemaMaskBench, ZodSafeIntegerBoundsAreExact) {
  // What zod 4 writes for z.number().int().
  auto g = schema(R"({"type": "object", "properties": {"age": {"type": "integer",
      "minimum": -9007199254740991, "maximum": 9007199254740991}}, "required": ["age"],
      "additionalProperties": false})");
  for (const char *ok : {"0", "-1", "42", "9007199254740991", "-9007199254740991",
                         "9007199254740990", "1000000000000000"})
    EXPECT_TRUE(matches(g, std::string(R"({"age": )") + ok + "}")) << ok;
  for (const char *bad : {"9007199254740992", "-9007199254740992", "10000000000000000",
                          "99999999999999999", "01", "-0", "1.5"})
    EXPECT_FALSE(matches(g, std::string(R"({"age": )") + bad + "}")) << bad;
}

TEST(JsonSchemaMaskBench, ExclusiveAndHugeIntegerBounds) {
  // zod .int().positive(): exclusiveMinimum 0 beside the safe maximum.
  auto pos = schema(R"({"type": "integer", "exclusiveMinimum": 0, "maximum": 9007199254740991})");
  EXPECT_FALSE(matches(pos, "0"));
  EXPECT_TRUE(matches(pos, "1"));
  EXPECT_TRUE(matches(pos, "9007199254740991"));
  EXPECT_FALSE(matches(pos, "9007199254740992"));
  // pydantic conint(gt=-3, lt=1000) and a bound past 2^64.
  auto py = schema(R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 1000})");
  EXPECT_FALSE(matches(py, "-3"));
  EXPECT_TRUE(matches(py, "-2"));
  EXPECT_TRUE(matches(py, "999"));
  EXPECT_FALSE(matches(py, "1000"));
  auto big = schema(R"({"type": "integer", "minimum": 100000000000000000000000})");
  EXPECT_TRUE(matches(big, "100000000000000000000000"));
  EXPECT_TRUE(matches(big, "1000000000000000000000000000"));
  EXPECT_FALSE(matches(big, "99999999999999999999999"));
  EXPECT_FALSE(matches(big, "5"));
  auto fmin = schema(R"({"type": "integer", "minimum": 2.5, "maximum": 1e20})");
  EXPECT_FALSE(matches(fmin, "2"));
  EXPECT_TRUE(matches(fmin, "3"));
  EXPECT_TRUE(matches(fmin, "100000000000000000000"));
  EXPECT_FALSE(matches(fmin, "100000000000000000001"));
  // Without bounds, bounded like whitespace so a weak model still ends: 20 integer
  // digits (every 64-bit integer), 17 fraction digits, a 3-digit exponent.
  auto any = schema(R"({"type": "integer"})");
  EXPECT_TRUE(matches(any, "12345678901234567890"));
  EXPECT_FALSE(matches(any, "123456789012345678901"));
  auto num = schema(R"({"type": "number"})");
  EXPECT_TRUE(matches(num, "-1.2345678901234567e-300"));
  EXPECT_FALSE(matches(num, "1.2345678901234567890123e-300"));
  EXPECT_FALSE(matches(num, "1e1000"));
}

TEST(JsonSchemaMaskBench, BoundedWhitespaceIsWhatJsonDumpsWrites) {
  const char *s = R"({"type": "object", "properties": {"a": {"type": "array", "items":
      {"type": "integer"}}}, "required": ["a"], "additionalProperties": false})";
  auto g = schema(s);
  EXPECT_TRUE(matches(g, R"({"a":[1,2]})"));
  EXPECT_TRUE(matches(g, R"({"a": [1, 2]})"));
  EXPECT_TRUE(matches(g, "{\n  \"a\": [\n    1,\n    2\n  ]\n}"));
  EXPECT_TRUE(matches(g, "{\n" + std::string(40, ' ') + "\"a\": []}"));
  EXPECT_FALSE(prefix_ok(g, "{\n" + std::string(41, ' ')));
  EXPECT_FALSE(prefix_ok(g, "{  "));
  EXPECT_FALSE(prefix_ok(g, "{\t"));
  EXPECT_FALSE(prefix_ok(g, "{\n\n"));
  EXPECT_FALSE(prefix_ok(g, "{\r\n"));
  // The schema's root opts out: the JSON spec's whitespace, or none.
  auto strict =
      schema(R"({"x-keel-whitespace": "strict", "type": "array", "items": {"type": "integer"}})");
  EXPECT_TRUE(matches(strict, "[ \t\r\n\n  1 ,\n\n\t 2 ]"));
  auto none =
      schema(R"({"x-keel-whitespace": "none", "type": "array", "items": {"type": "integer"}})");
  EXPECT_TRUE(matches(none, "[1,2]"));
  EXPECT_FALSE(matches(none, "[1, 2]"));
  EXPECT_NE(
      compile_error(K::kJsonSchema, R"({"x-keel-whitespace": "lots"})").find("x-keel-whitespace"),
      std::string::npos);
  JsonSchemaOptions opts;
  opts.whitespace = JsonWhitespace::kStrict;
  auto cli = bytes_only(json_schema_grammar(std::string_view(s), opts));
  EXPECT_TRUE(matches(cli, "{\t\"a\"\r\n:\t[ ]  }"));
}

TEST(JsonSchemaMaskBench, KeysNotListedAreAllowedButNeverAListedName) {
  auto g = schema(R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}}, "required": ["name"]})");
  EXPECT_TRUE(matches(g, R"({"name": "a"})"));
  EXPECT_TRUE(matches(g, R"({"name": "a", "age": 3, "nick": [1, {"x": null}]})"));
  EXPECT_TRUE(matches(g, R"({"name": "a", "ag": "x", "ages": true, "": 1, "nam": 2})"));
  EXPECT_FALSE(matches(g, R"({"name": "a", "age": "three"})"));
  EXPECT_FALSE(matches(g, R"({"name": "a", "name": 5})"));
  EXPECT_FALSE(matches(g, R"({"name": "a", "\u0061ge": "x"})"));
  // additionalProperties false: the listed keys only.
  auto closed = schema(R"({"type": "object", "properties": {"name": {"type": "string"}},
      "additionalProperties": false})");
  EXPECT_FALSE(matches(closed, R"({"name": "a", "x": 1})"));
  // A schema for the others: applies to keys not listed only.
  auto typed = schema(R"({"type": "object", "properties": {"n": {"type": "integer"}},
      "additionalProperties": {"type": "string"}})");
  EXPECT_TRUE(matches(typed, R"({"n": 1, "m": "s"})"));
  EXPECT_FALSE(matches(typed, R"({"n": 1, "m": 2})"));
  EXPECT_FALSE(matches(typed, R"({"n": 1, "n": "s"})"));
}

TEST(JsonSchemaMaskBench, AllOfMergesExactlyOrRefuses) {
  auto g = schema(R"({"$defs": {"base": {"type": "object", "properties": {"id": {"type":
      "integer", "minimum": 0}}, "required": ["id"]}}, "allOf": [{"$ref": "#/$defs/base"},
      {"properties": {"id": {"maximum": 9}, "name": {"type": "string"}}, "required": ["name"]}]})");
  EXPECT_TRUE(matches(g, R"({"id": 3, "name": "a"})"));
  EXPECT_FALSE(matches(g, R"({"id": 10, "name": "a"})"));
  EXPECT_FALSE(matches(g, R"({"id": -1, "name": "a"})"));
  EXPECT_FALSE(matches(g, R"({"id": 3})"));
  // additionalProperties: false in one part forbids the other part's properties: refused
  // rather than widened.
  EXPECT_NE(compile_error(K::kJsonSchema, R"({"allOf": [{"properties": {"a": {}},
      "additionalProperties": false}, {"properties": {"b": {}}}]})")
                .find("additionalProperties"),
            std::string::npos);
  EXPECT_NE(compile_error(K::kJsonSchema, R"({"allOf": [{"type": "string"}, {"type": "integer"}]})")
                .find("no type"),
            std::string::npos);
}

TEST(JsonSchemaMaskBench, PatternPropertiesWhenExact) {
  auto g = schema(R"({"type": "object", "properties": {"Name": {"type": "string"}},
      "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": false})");
  EXPECT_TRUE(matches(g, R"({"Name": "a", "x-one": 1, "x-two": 2})"));
  EXPECT_FALSE(matches(g, R"({"Name": "a", "x-one": "s"})"));
  EXPECT_FALSE(matches(g, R"({"Name": "a", "y": 1})"));
  // A listed name that the pattern matches would need both schemas: refused.
  EXPECT_NE(compile_error(K::kJsonSchema, R"({"properties": {"ab": {}},
      "patternProperties": {"^a": {"type": "integer"}}})")
                .find("patternProperties"),
            std::string::npos);
}

TEST(JsonSchemaMaskBench, OneClassPatternWithLengths) {
  auto g = schema(R"({"type": "string", "pattern": "^[a-z0-9-]*$", "minLength": 4,
      "maxLength": 6})");
  EXPECT_FALSE(matches(g, R"("abc")"));
  EXPECT_TRUE(matches(g, R"("ab-c")"));
  EXPECT_TRUE(matches(g, R"("abcdef")"));
  EXPECT_FALSE(matches(g, R"("abcdefg")"));
  EXPECT_FALSE(matches(g, R"("abCd")"));
  auto w = schema(R"({"type": "string", "pattern": "^(\\w+)$", "maxLength": 3})");
  EXPECT_FALSE(matches(w, R"("")"));
  EXPECT_TRUE(matches(w, R"("a_1")"));
  EXPECT_FALSE(matches(w, R"("a_12")"));
}

TEST(JsonSchemaMaskBench, OneOfOnlyWithDisjointBranches) {
  auto g = schema(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})");
  EXPECT_TRUE(matches(g, R"("a")"));
  EXPECT_TRUE(matches(g, "3"));
  // {"a": 1, "b": 2} is valid under both branches, so oneOf rejects it: refused.
  EXPECT_NE(compile_error(K::kJsonSchema, R"({"oneOf": [{"required": ["a"]},
      {"required": ["b"]}]})")
                .find("oneOf"),
            std::string::npos);
}

// MaskBench's invalid instances that were accepted (issue 28): each keyword is now
// enforced or refused, never ignored.
TEST(JsonSchemaMaskBench, ConstMustHaveTheTypeAndBeInTheEnum) {
  EXPECT_TRUE(matches(schema(R"({"type": "integer", "const": 3})"), "3"));
  // No value is both a string and 5: refused, not "5" accepted.
  EXPECT_NE(
      compile_error(K::kJsonSchema, R"({"properties": {"v": {"type": "string", "const": 5}}})")
          .find("properties.v.const"),
      std::string::npos);
  EXPECT_NE(compile_error(K::kJsonSchema, R"({"const": "a", "enum": ["b", "c"]})").find("const"),
            std::string::npos);
  auto both = schema(R"({"const": "b", "enum": ["b", "c"]})");
  EXPECT_TRUE(matches(both, R"("b")"));
  EXPECT_FALSE(matches(both, R"("c")"));
}

TEST(JsonSchemaMaskBench, ATrueBranchKeepsTheParentsKeywords) {
  // `true` allows what the parent allows, not any value (written or through $ref).
  for (const char *text : {R"({"type": "integer", "maximum": 9, "anyOf": [true, {"minimum": 5}]})",
                           R"({"$defs": {"t": true}, "type": "integer", "maximum": 9,
            "anyOf": [{"$ref": "#/$defs/t"}, {"minimum": 5}]})"}) {
    auto g = schema(text);
    EXPECT_TRUE(matches(g, "7")) << text;
    EXPECT_TRUE(matches(g, "-3")) << text;       // through the true branch
    EXPECT_FALSE(matches(g, "12")) << text;      // past the parent's maximum
    EXPECT_FALSE(matches(g, R"("x")")) << text;  // not the parent's type
    EXPECT_FALSE(matches(g, "[]")) << text;
  }
}

TEST(JsonSchemaMaskBench, KeywordsBesideARefHoldToo) {
  // {"$ref": X, "maximum": 3} is X and maximum 3, at the root and in a property.
  auto root = schema(R"({"$defs": {"x": {"type": "integer"}}, "$ref": "#/$defs/x",
      "maximum": 3})");
  EXPECT_TRUE(matches(root, "2"));
  EXPECT_FALSE(matches(root, "7"));
  EXPECT_FALSE(matches(root, R"("2")"));
  auto prop = schema(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/x",
      "maximum": 3}}, "required": ["a"], "additionalProperties": false,
      "$defs": {"x": {"type": "integer"}}})");
  EXPECT_TRUE(matches(prop, R"({"a": 2})"));
  EXPECT_FALSE(matches(prop, R"({"a": 7})"));
  // A lone recursive $ref is still a rule call.
  auto tree = schema(R"({"$defs": {"n": {"type": "object", "properties": {"kids": {"type":
      "array", "items": {"$ref": "#/$defs/n"}}}, "additionalProperties": false}},
      "$ref": "#/$defs/n"})");
  EXPECT_TRUE(matches(tree, R"({"kids": [{"kids": []}, {}]})"));
  EXPECT_FALSE(matches(tree, R"({"kids": [{"kid": []}]})"));
}

TEST(JsonSchemaMaskBench, EnumsOfAnAnyOfBranchAndItsParentIntersect) {
  // The parent's enum holds for every branch; the branch's for itself.
  auto g = schema(R"({"enum": ["eq", "gt", "or", 1], "anyOf": [{"type": "string",
      "enum": ["or", "and"]}, {"type": "integer"}]})");
  EXPECT_TRUE(matches(g, R"("or")"));
  EXPECT_TRUE(matches(g, "1"));
  EXPECT_FALSE(matches(g, R"("gt")"));   // in the parent's enum, not the string branch's
  EXPECT_FALSE(matches(g, R"("and")"));  // in the branch's, not the parent's
  EXPECT_FALSE(matches(g, "2"));
  // A branch whose values the parent's type excludes matches nothing: left out.
  auto t = schema(R"({"type": "string", "anyOf": [{"const": 5}, {"enum": ["a", 6]}]})");
  EXPECT_TRUE(matches(t, R"("a")"));
  EXPECT_FALSE(matches(t, "5"));
  EXPECT_FALSE(matches(t, "6"));
  EXPECT_NE(
      compile_error(K::kJsonSchema, R"({"type": "string", "anyOf": [{"const": 5}]})").find("anyOf"),
      std::string::npos);
}

TEST(JsonSchemaMaskBench, CheckedFormatsAreEnforcedOrRefused) {
  auto iri = schema(R"({"type": "string", "format": "iri"})");
  EXPECT_TRUE(matches(iri, R"("https://例え.jp/パス")"));
  EXPECT_FALSE(matches(iri, R"("not-an-iri")"));
  auto v6 = schema(R"({"type": "string", "format": "ipv6"})");
  for (const char *ok : {R"("::1")", R"("2001:db8::8a2e:370:7334")", R"("fe80::")", R"("::")"})
    EXPECT_TRUE(matches(v6, ok)) << ok;
  for (const char *bad : {R"("1::2::3")", R"("12345::")", R"("g::1")", R"(":1")"})
    EXPECT_FALSE(matches(v6, bad)) << bad;
  // Formats validators check that no regular language here writes: a 400 naming them.
  for (const char *f : {"regex", "uri-reference", "duration", "json-pointer"}) {
    const std::string err = compile_error(
        K::kJsonSchema,
        std::string(R"x({"properties": {"r": {"type": "string", "format": ")x") + f + R"x("}}})x");
    EXPECT_NE(err.find("properties.r.format"), std::string::npos) << err;
    EXPECT_NE(err.find(f), std::string::npos) << err;
  }
  // A format whose strings may be longer than maxLength: refused, not the bound ignored.
  EXPECT_NE(
      compile_error(K::kJsonSchema, R"({"type": "string", "format": "email", "maxLength": 20})")
          .find("format"),
      std::string::npos);
  auto date = schema(R"({"type": "string", "format": "date", "maxLength": 10})");
  EXPECT_TRUE(matches(date, R"("2026-12-05")"));
}

TEST(JsonSchemaMaskBench, DependenciesAreRefused) {
  // Draft 4's dependencies ({"favoriteTopic": ["tags"]}) make one key require another:
  // refused with its path, not ignored.
  const std::string err = compile_error(K::kJsonSchema, R"({"type": "object", "properties":
      {"tags": {"type": "array"}, "favoriteTopic": {"type": "string"}},
      "dependencies": {"favoriteTopic": ["tags"]}})");
  EXPECT_NE(err.find("dependencies"), std::string::npos) << err;
  EXPECT_TRUE(matches(schema(R"({"type": "object", "dependencies": {}})"), "{}"));
}

TEST(JsonSchemaMaskBench, ForcedToolCallsGenerateDeclaredParametersOnly) {
  TaggedJson t;
  t.begin = "<tool_call>\n";
  t.end = "\n</tool_call>";
  t.options.push_back({R"({"name": "f", "arguments": )",
                       nlohmann::ordered_json::parse(
                           R"({"type": "object", "properties": {"city": {"type": "string"}}})"),
                       "}"});
  auto g = bytes_only(tagged_json_grammar(t, "tools"));
  EXPECT_TRUE(
      matches(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>"));
  EXPECT_FALSE(prefix_ok(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"x\", \"q"));
}

TEST(JsonSchemaMaskBench, PythonJsonDumps) {
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.5e16), "1.5e+16");
  EXPECT_EQ(python_float_repr(100.0), "100.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(python_float_repr(123456789012345.6), "123456789012345.6");
  auto v = nlohmann::ordered_json::parse(
      R"({"b": [1, 2.0, "é\n\u0001"], "a": {}, "c": [], "d": null, "e": true})");
  EXPECT_EQ(python_json_dumps(v),
            "{\"b\": [1, 2.0, \"é\\n\\u0001\"], \"a\": {}, \"c\": [], \"d\": null, \"e\": true}");
}

TEST(JsonSchemaMaskBench, CaseWalksTheTokenMasks) {
  const auto c = parse_maskbench_case(R"({"schema": {"type": "object", "properties":
      {"n": {"type": "integer", "maximum": 5}}, "required": ["n"]},
      "tests": [{"valid": true, "data": {"n": 5}}, {"valid": false, "data": {"n": 6}},
                {"valid": false, "data": {}}]})",
                                      "case");
  ASSERT_EQ(c.instances.size(), 3u);
  EXPECT_EQ(c.instances[0].text, R"({"n": 5})");
  // A vocabulary of single bytes and a few merged tokens, with an end token.
  std::vector<std::string> bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(std::string(1, char(i)));
  bytes.push_back("{\"");
  bytes.push_back("\": ");
  bytes.push_back("");  // EOS
  const TokenId eos = TokenId(bytes.size() - 1);
  auto vocab =
      std::make_shared<const TokenVocab>(bytes, std::vector<TokenId>{eos}, std::vector<TokenId>{});
  JsonSchemaOptions opts;
  auto g = std::make_shared<const CompiledGrammar>(json_schema_grammar(c.schema, opts), vocab);
  auto ids = [&](const std::string &text, bool merged) {
    std::vector<TokenId> out;
    std::size_t i = 0;
    if (merged && text.rfind("{\"", 0) == 0) {
      out.push_back(256);
      i = 2;
    }
    for (; i < text.size(); ++i) out.push_back(TokenId(std::uint8_t(text[i])));
    return out;
  };
  std::vector<double> us;
  auto ok = walk_tokens(g, ids(c.instances[0].text, true), &us);
  EXPECT_TRUE(ok.accepted);
  EXPECT_FALSE(ok.mask_disagrees);
  EXPECT_EQ(us.size(), ok.tokens + 1);
  auto over = walk_tokens(g, ids(c.instances[1].text, true), nullptr);
  EXPECT_FALSE(over.accepted);
  EXPECT_EQ(over.stopped_at, 5u);  // {" n " : space 6
  auto missing = walk_tokens(g, ids(c.instances[2].text, false), nullptr);
  EXPECT_FALSE(missing.accepted);
  EXPECT_EQ(missing.stopped_at, 1u);  // "}" before the required "n"
}

}  // namespace
}  // namespace keel::grammar::test

namespace keel::grammar::test {
namespace {

std::shared_ptr<const CompiledGrammar> compiled(std::string_view text) {
  return compile(ConstraintKind::kJsonSchema, text);
}

// oneOf whose branches are told apart by a required property with disjoint values (a
// discriminator), or by a key the other branch's additionalProperties: false forbids,
// is anyOf: no value can match two branches. MaskBench's GeoJSON-style unions.
TEST(JsonSchemaMaskBench, OneOfWithADiscriminatorIsCompiled) {
  auto g = compiled(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
       "required": ["kind", "r"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"enum": ["square", "box"]},
       "side": {"type": "number"}}, "required": ["kind", "side"], "additionalProperties": false}]})");
  EXPECT_TRUE(matches(g, R"({"kind": "circle", "r": 1})"));
  EXPECT_TRUE(matches(g, R"({"kind": "box", "side": 2})"));
  EXPECT_FALSE(matches(g, R"({"kind": "circle", "side": 2})"));
  EXPECT_FALSE(matches(g, R"({"kind": "triangle", "side": 2})"));
  auto forbids = compiled(R"({"type": "object", "oneOf": [
      {"properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false},
      {"properties": {"b": {"type": "integer"}}, "required": ["b"], "additionalProperties": false}]})");
  EXPECT_TRUE(matches(forbids, R"({"a": 1})"));
  EXPECT_TRUE(matches(forbids, R"({"b": 1})"));
  EXPECT_FALSE(matches(forbids, R"({"a": 1, "b": 1})"));
  // Same discriminator value on both sides: a value may match both, still refused.
  EXPECT_NE(compile_error(ConstraintKind::kJsonSchema, R"({"oneOf": [
      {"type": "object", "properties": {"k": {"const": "x"}}, "required": ["k"]},
      {"type": "object", "properties": {"k": {"enum": ["x", "y"]}}, "required": ["k"]}]})")
                .find("oneOf"),
            std::string::npos);
  // Disjoint const/enum values.
  auto vals = compiled(R"({"oneOf": [{"enum": ["a", "b"]}, {"const": "c"}]})");
  EXPECT_TRUE(matches(vals, R"("c")"));
  EXPECT_FALSE(matches(vals, R"("d")"));
}

// A branch keeps its parent's constraints: the parent's required and properties are
// united with the branch's, not replaced by them.
TEST(JsonSchemaMaskBench, BranchesKeepTheParentsRequiredAndProperties) {
  auto g = compiled(R"({"type": "object", "required": ["name"],
      "properties": {"name": {"type": "string"}, "kind": {"type": "string"}},
      "additionalProperties": false,
      "anyOf": [{"properties": {"kind": {"const": "a"}}},
                {"required": ["kind"], "properties": {"kind": {"const": "b"}}}]})");
  EXPECT_TRUE(matches(g, R"({"name": "x", "kind": "a"})"));
  EXPECT_TRUE(matches(g, R"({"name": "x", "kind": "b"})"));
  EXPECT_TRUE(matches(g, R"({"name": "x"})"));
  EXPECT_FALSE(matches(g, R"({"kind": "b"})"));  // name is required by the parent
  EXPECT_FALSE(matches(g, R"({"name": "x", "kind": "c"})"));
}

// A schema without "type" whose keywords constrain one type (patternProperties alone,
// say) is that type, never any value.
TEST(JsonSchemaMaskBench, KeywordsWithoutTypeInferIt) {
  auto g = compiled(R"({"patternProperties": {"^x": {"type": "integer"}},
                        "additionalProperties": false})");
  EXPECT_TRUE(matches(g, R"({"x1": 3})"));
  EXPECT_FALSE(matches(g, R"({"x1": "s"})"));
  EXPECT_FALSE(matches(g, R"({"y": 3})"));
  auto n = compiled(R"({"minimum": 5})");
  EXPECT_TRUE(matches(n, "7"));
  EXPECT_FALSE(matches(n, "4"));
}

// Long strings: maxLength past the old 10,000 cap and many bounded strings are rules of
// blocks, exact at the bound.
TEST(JsonSchemaMaskBench, LongLengthBoundsAreExact) {
  auto g = compiled(R"({"type": "string", "minLength": 300, "maxLength": 32767})");
  EXPECT_FALSE(matches(g, "\"" + std::string(299, 'a') + "\""));
  EXPECT_TRUE(matches(g, "\"" + std::string(300, 'a') + "\""));
  EXPECT_TRUE(matches(g, "\"" + std::string(32767, 'b') + "\""));
  EXPECT_FALSE(matches(g, "\"" + std::string(32768, 'b') + "\""));
  EXPECT_TRUE(matches(g, "\"" + std::string(1000, 'c') + "\""));
  // Two hundred fields of maxLength 1024: over the 200,000-state cap when expanded.
  std::string many = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 200; ++i)
    many += (i ? ", " : "") + std::string("\"f") + std::to_string(i) +
            R"(": {"type": "string", "maxLength": 1024, "format": "date-time"})";
  many += "}}";
  auto m = compiled(many);
  EXPECT_TRUE(matches(m, R"({"f7": "2024-02-29T10:00:00Z"})"));
  EXPECT_FALSE(matches(m, R"({"f7": "2023-02-29T10:00:00Z"})"));
}

}  // namespace
}  // namespace keel::grammar::test
