#include "core/bounded_json.h"

#include <memory>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace keel {

namespace {

// Builds the document from nlohmann's SAX events with a stack of open containers (no
// recursion), checking each limit before the value it guards is stored.
template <typename Json>
class BoundedBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedBuilder(const JsonLimits &limits, JsonParseFailure &failure)
      : limits_(limits), failure_(failure) {}

  Json take() { return std::move(root_); }

  bool null() { return add(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return add(Json(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return add(Json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return add(Json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t &) { return add(Json(v)) != nullptr; }
  bool string(string_t &v) {
    if (v.size() > limits_.max_string_bytes)
      return limit("a string of " + std::to_string(v.size()) + " bytes is over the limit of " +
                   std::to_string(limits_.max_string_bytes) + " bytes");
    return add(Json(std::move(v))) != nullptr;
  }
  bool binary(binary_t &) { return syntax("binary values are not JSON"); }

  bool start_object(std::size_t) { return open(Json::value_t::object); }
  bool start_array(std::size_t) { return open(Json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t &k) {
    Frame &f = stack_.back();
    if (++f.count > limits_.max_object_keys)
      return limit("an object with more than " + std::to_string(limits_.max_object_keys) +
                   " keys is over the limit");
    if (k.size() > limits_.max_string_bytes)
      return limit("a key of " + std::to_string(k.size()) + " bytes is over the limit of " +
                   std::to_string(limits_.max_string_bytes) + " bytes");
    auto &obj = *f.value->template get_ptr<typename Json::object_t *>();
    if constexpr (std::is_same_v<Json, nlohmann::ordered_json>) {
      // ordered_map is a vector of pairs whose own insert scans every key: append
      // instead, and find repeats through a hash index once the object is not tiny.
      auto &items = static_cast<std::vector<std::pair<const std::string, Json>> &>(obj);
      constexpr std::size_t kScanUpTo = 16;
      std::size_t at = items.size();
      if (items.size() < kScanUpTo) {
        for (std::size_t i = 0; i < items.size(); ++i)
          if (items[i].first == k) at = i;
      } else {
        if (!f.index) {
          f.index = std::make_unique<std::unordered_map<std::string, std::size_t>>();
          f.index->reserve(items.size() * 2);
          for (std::size_t i = 0; i < items.size(); ++i) f.index->emplace(items[i].first, i);
        }
        auto [it, inserted] = f.index->emplace(k, items.size());
        if (!inserted) at = it->second;
      }
      if (at == items.size()) {
        items.emplace_back(std::move(k), Json());
        pending_ = &items.back().second;
      } else {
        pending_ = &items[at].second;
        *pending_ = Json();  // a repeated key keeps its last value
      }
    } else {
      auto [it, inserted] = obj.try_emplace(std::move(k));
      if (!inserted) it->second = Json();
      pending_ = &it->second;
    }
    return true;
  }

  template <typename Exception>
  bool parse_error(std::size_t position, const std::string &last_token, const Exception &e) {
    failure_.byte_offset = position;
    if (failure_.message.empty()) {
      failure_.kind = JsonParseFailure::Kind::kSyntax;
      // out_of_range.406: a number past what a double holds (1e400).
      failure_.message = e.id == 406 ? "number out of range: " + last_token : e.what();
    }
    return false;
  }

 private:
  struct Frame {
    Json *value;
    std::size_t count = 0;  // keys or items so far
    std::unique_ptr<std::unordered_map<std::string, std::size_t>> index;
  };

  // Stores `v` where the parser stands; returns where it landed (null on a limit).
  Json *add(Json &&v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame &f = stack_.back();
    if (f.value->is_array()) {
      if (++f.count > limits_.max_array_items) {
        limit("an array with more than " + std::to_string(limits_.max_array_items) +
              " items is over the limit");
        return nullptr;
      }
      auto &arr = *f.value->template get_ptr<typename Json::array_t *>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    *pending_ = std::move(v);
    return pending_;
  }

  bool open(typename Json::value_t type) {
    if (stack_.size() >= limits_.max_depth)
      return limit("nesting deeper than the limit of " + std::to_string(limits_.max_depth) +
                   " levels");
    Json *at = add(Json(type));
    if (!at) return false;
    stack_.push_back(Frame{at, 0, nullptr});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  bool limit(std::string message) {
    failure_.kind = JsonParseFailure::Kind::kLimit;
    failure_.message = std::move(message);
    return false;
  }
  bool syntax(std::string message) {
    failure_.kind = JsonParseFailure::Kind::kSyntax;
    failure_.message = std::move(message);
    return false;
  }

  const JsonLimits &limits_;
  JsonParseFailure &failure_;
  Json root_;
  Json *pending_ = nullptr;  // the value slot of the object key just read
  std::vector<Frame> stack_;
};

}  // namespace

template <typename Json>
std::optional<Json> parse_bounded_json(std::string_view text, const JsonLimits &limits,
                                       JsonParseFailure *failure) {
  JsonParseFailure local;
  JsonParseFailure &f = failure ? *failure : local;
  f = {};
  BoundedBuilder<Json> builder(limits, f);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &builder, Json::input_format_t::json, true);
  } catch (const std::bad_alloc &) {
    throw;
  } catch (const std::exception &e) {
    // The SAX parser reports through parse_error; this is only a guard.
    if (f.message.empty()) f = {JsonParseFailure::Kind::kSyntax, e.what(), 0};
    ok = false;
  }
  if (!ok) {
    if (f.message.empty()) f.message = "malformed JSON";
    return std::nullopt;
  }
  return builder.take();
}

template std::optional<nlohmann::json> parse_bounded_json<nlohmann::json>(std::string_view,
                                                                          const JsonLimits &,
                                                                          JsonParseFailure *);
template std::optional<nlohmann::ordered_json> parse_bounded_json<nlohmann::ordered_json>(
    std::string_view, const JsonLimits &, JsonParseFailure *);

}  // namespace keel
