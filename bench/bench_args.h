// Command-line lists for the benchmarks: "1,64,256" -> {1, 64, 256}.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace keel::bench {

inline std::vector<std::string> comma_list(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
  return out;
}

// Throws std::invalid_argument / std::out_of_range (std::stoi) on a bad number.
inline std::vector<int> int_list(const std::string &s) {
  std::vector<int> out;
  for (const std::string &x : comma_list(s)) out.push_back(std::stoi(x));
  return out;
}

}  // namespace keel::bench
