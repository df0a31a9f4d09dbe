// JSON Schema documents embedded in literal text (the forced tool call's constraint).
#include "grammar/tagged_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar_test_util.h"

namespace keel::grammar::test {
namespace {

using json = nlohmann::ordered_json;

TaggedJson two_calls() {
  TaggedJson t;
  t.begin = "<tool_call>\n";
  t.end = "\n</tool_call>";
  t.options.push_back({R"({"name": "get_weather", "arguments": )",
                       json::parse(R"({"type": "object", "properties": {"city": {"type": "string",
                         "maxLength": 8}}, "required": ["city"], "additionalProperties": false})"),
                       "}"});
  // Its own root: "#/$defs/unit" resolves inside this option's schema.
  t.options.push_back({R"({"name": "convert", "arguments": )",
                       json::parse(R"({"type": "object", "properties": {"to": {"$ref":
                         "#/$defs/unit"}}, "required": ["to"], "$defs": {"unit": {"enum":
                         ["c", "f"]}}})"),
                       "}"});
  return t;
}

TEST(TaggedJson, LiteralTextAroundOneOfTheDocuments) {
  auto g = compile(ConstraintKind::kTaggedJson, tagged_json_text(two_calls()));
  EXPECT_TRUE(matches(g,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                      "\"Oslo\"}}\n</tool_call>"));
  EXPECT_TRUE(matches(
      g, "<tool_call>\n{\"name\": \"convert\", \"arguments\": {\"to\": \"f\"}}\n</tool_call>"));
  // The other tool's arguments, a missing required key, a value off the schema.
  EXPECT_FALSE(matches(
      g,
      "<tool_call>\n{\"name\": \"convert\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(
      matches(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(
      g, "<tool_call>\n{\"name\": \"convert\", \"arguments\": {\"to\": \"k\"}}\n</tool_call>"));
  // Neither plain text nor a call without its markup.
  EXPECT_FALSE(prefix_ok(g, "Sure"));
  EXPECT_FALSE(prefix_ok(g, "{\"name\""));
  EXPECT_FALSE(prefix_ok(g, "<tool_call>\n{\"name\": \"other\""));
}

TEST(TaggedJson, TextRoundTripsAndBareJsonNeedsNoMarkup) {
  TaggedJson t = two_calls();
  t.begin = t.end = "";
  const TaggedJson back = parse_tagged_json(tagged_json_text(t), "x");
  ASSERT_EQ(back.options.size(), 2u);
  EXPECT_EQ(back.options[1].schema, t.options[1].schema);
  auto g = bytes_only(tagged_json_grammar(back, "x"));
  EXPECT_TRUE(matches(g, R"({"name": "convert", "arguments": {"to": "c"}})"));
}

TEST(TaggedJson, ErrorsNameTheOptionAndThePathInItsSchema) {
  TaggedJson t = two_calls();
  t.options[1].schema = json::parse(R"({"type": "object", "properties": {"n": {"type":
    "number", "multipleOf": 3}}})");
  const std::string err =
      compile_error(ConstraintKind::kTaggedJson, tagged_json_text(t), "tool_choice");
  EXPECT_EQ(err.rfind("tool_choice.options.1.schema.properties.n.multipleOf: ", 0), 0u) << err;
  EXPECT_EQ(compile_error(ConstraintKind::kTaggedJson, R"({"options": []})", "w"),
            "w.options: must be a non-empty array");
  EXPECT_NE(compile_error(ConstraintKind::kTaggedJson, "not json", "w"), "");
}

}  // namespace
}  // namespace keel::grammar::test
