// Python's spelling of a float: repr(x) (shortest round-trip digits; 1e-05, 1e+16, 100.0)
// and json.dumps(x). Chat templates (jinja) and MaskBench's instances (grammar) both need
// byte-exact Python output.
#pragma once

#include <string>

namespace keel {

std::string python_float_repr(double x);  // repr(float): "nan", "inf", "-inf" for those
std::string python_json_float(double x);  // json.dumps(float): "NaN", "Infinity", "-Infinity"

}  // namespace keel
