// Python string semantics that Jinja2 templates rely on, over UTF-8 std::string:
// code-point length and slicing, str.strip's whitespace, repr() quoting, float repr,
// and json.dumps(ensure_ascii=False). Rendering byte-identical to HF transformers needs
// these to match CPython exactly, not merely approximately.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

namespace keel::jinja::py {

// Decodes UTF-8 into code points. Invalid bytes decode as themselves (0x80..0xFF) so
// that bad input never crashes and round-trips through encode().
std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t> &cps);
bool is_ascii(std::string_view s);
bool valid_utf8(std::string_view s);
size_t length(std::string_view s);  // number of code points

// str.isspace() for one code point, and strip/lstrip/rstrip with optional chars.
bool is_space(char32_t cp);
std::string strip(std::string_view s, bool left, bool right, const std::string *chars = nullptr);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title(std::string_view s);       // str.title()
bool is_alpha(char32_t cp);
bool is_digit(char32_t cp);
bool is_upper_cp(char32_t cp);
bool is_lower_cp(char32_t cp);

std::string repr_string(std::string_view s);  // repr(str): 'quoted' with escapes
std::string repr_float(double v);             // repr(float): shortest round-trip
std::string json_string(std::string_view s);  // json.dumps(str, ensure_ascii=False)
std::string json_float(double v);             // json.dumps(float): repr, NaN, Infinity
std::string html_escape(std::string_view s);  // markupsafe.escape

}  // namespace keel::jinja::py
