// JSON from outside (request bodies, tool-call arguments) parsed with limits that hold
// before the work is done: nesting depth, keys per object, items per array and bytes per
// string are checked as the parser reaches them (a SAX pass, no recursion), so a
// 100,000-deep body is refused at level 129 and never reaches code that recurses over
// the document (copies, dumps, templates). Keys are kept in a hash index while an object
// is built, so an object of n keys costs O(n), not ordered_json's O(n^2); a repeated key
// keeps its last value, as nlohmann does. Numbers that do not fit a double (1e400) are
// refused like any malformed input, not thrown as out_of_range.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace keel {

struct JsonLimits {
  std::size_t max_depth = 128;               // nested objects and arrays (the top level is 1)
  std::size_t max_object_keys = 4096;        // keys of one object
  std::size_t max_array_items = 1 << 20;     // items of one array
  std::size_t max_string_bytes = 16u << 20;  // one string or key
};

struct JsonParseFailure {
  enum class Kind { kSyntax, kLimit };
  Kind kind = Kind::kSyntax;
  // "nesting deeper than 128 levels", "malformed JSON: ...", "number out of range ..."
  std::string message;
  std::size_t byte_offset = 0;  // where the parser stopped
};

// One JSON document, whole (trailing bytes other than whitespace are an error).
// Returns nullopt and fills `failure` (when given) on malformed input or a limit.
template <typename Json>
std::optional<Json> parse_bounded_json(std::string_view text, const JsonLimits &limits = {},
                                       JsonParseFailure *failure = nullptr);

extern template std::optional<nlohmann::json> parse_bounded_json<nlohmann::json>(
    std::string_view, const JsonLimits &, JsonParseFailure *);
extern template std::optional<nlohmann::ordered_json> parse_bounded_json<nlohmann::ordered_json>(
    std::string_view, const JsonLimits &, JsonParseFailure *);

}  // namespace keel
