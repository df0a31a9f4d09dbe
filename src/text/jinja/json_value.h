// Conversion between nlohmann JSON documents and template values. Pass
// nlohmann::ordered_json to keep object keys in document order, as Python's json.loads
// does; nlohmann::json sorts keys, which changes what tojson prints.
#pragma once

#include <cstdint>
#include <limits>

#include "core/error.h"
#include "text/jinja/value.h"

namespace keel::jinja {

template <typename Json>
Value from_json(const Json &j, int depth = 0) {
  if (depth > 512)
    throw Error(ErrorCode::kInvalidArgument, "JSON value nested deeper than 512 levels");
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Json::value_t::number_float:
      return Value(j.template get<double>());
    case Json::value_t::string:
      return Value(j.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto &e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.items.emplace_back(Value(it.key()), from_json(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();  // binary, discarded
  }
}

}  // namespace keel::jinja
