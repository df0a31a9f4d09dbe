// JSON text as Python's json.dumps(data, indent=None, ensure_ascii=False) writes it
// after json.loads: separators ", " and ": ", keys in document order, floats as repr()
// (shortest round trip; 1e-05, 1e+16, 100.0), non-ASCII kept, control characters as
// \u00XX. MaskBench checks each instance in exactly this form.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace keel::grammar {

// Python's repr() of a float ("Infinity" / "NaN" as json.dumps writes them).
std::string python_float_repr(double x);

std::string python_json_dumps(const nlohmann::ordered_json &value);

}  // namespace keel::grammar
