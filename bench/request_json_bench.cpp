// Request-body parsing (issue 31): the bounded parser every body goes through
// (core/bounded_json.h) against nlohmann::ordered_json::parse, which compares each new
// key with every earlier key of its object (quadratic), on bodies shaped as the attacks
// and as the limits allow.
//   request_json_bench [KEYS=200000]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/bounded_json.h"

namespace {

using ojson = nlohmann::ordered_json;
std::size_t sink = 0;  // keeps the parses from being optimized away

std::string object_with_keys(int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  return s + "}";
}

template <typename F>
double seconds(F f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char **argv) {
  const int keys = argc > 1 ? std::atoi(argv[1]) : 200000;
  keel::JsonLimits no_key_limit;
  no_key_limit.max_object_keys = 1u << 30;
  // One object of `keys` keys in an ignored field: refused at key 4,097.
  const std::string one = "{\"model\":\"m\",\"ignored\":" + object_with_keys(keys) + "}";
  const double refused = seconds([&] { sink += keel::parse_bounded_json<ojson>(one).has_value(); });
  const double linear =
      seconds([&] { sink += keel::parse_bounded_json<ojson>(one, no_key_limit).has_value(); });
  // ordered_json at 1/10 and 1/5 of the keys (the whole would take minutes): the ratio
  // shows the square law.
  const std::string tenth = "{\"ignored\":" + object_with_keys(keys / 10) + "}";
  const std::string fifth = "{\"ignored\":" + object_with_keys(keys / 5) + "}";
  const double nl10 = seconds([&] { sink += ojson::parse(tenth).size(); });
  const double nl5 = seconds([&] { sink += ojson::parse(fifth).size(); });
  std::printf(
      "%d keys in one object (%zu bytes): bounded parser refuses in %.4f s; without the "
      "key limit it parses in %.3f s\n",
      keys, one.size(), refused, linear);
  std::printf(
      "ordered_json::parse: %d keys %.3f s, %d keys %.3f s (x%.1f for x2 keys): %d keys "
      "~%.0f s by the square law\n",
      keys / 10, nl10, keys / 5, nl5, nl5 / nl10, keys, nl10 * 100);
  // At the limit: 400 objects of 4,096 keys (7.5 MB).
  std::string at_limit = "[";
  const std::string obj = object_with_keys(4096);
  for (int i = 0; i < 400; ++i) at_limit += (i ? "," : "") + obj;
  at_limit += "]";
  const double bl = seconds([&] { sink += keel::parse_bounded_json<ojson>(at_limit).has_value(); });
  const double nl = seconds([&] { sink += ojson::parse(at_limit).size(); });
  std::printf(
      "400 objects x 4,096 keys (%zu bytes): bounded parser %.3f s, ordered_json::parse "
      "%.3f s\n",
      at_limit.size(), bl, nl);
  // Depth: 100,000 levels (the crash) refused at level 129.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const double dr = seconds([&] { sink += keel::parse_bounded_json<ojson>(deep).has_value(); });
  std::printf("100,000-deep array (200 KB): refused in %.5f s\n", dr);
  return 0;
}
