// Reads llama.cpp's tokenizer test vectors: `.inp` holds strings each followed by
// "\n__ggml_vocab_test__\n"; `.out` holds one line of space-separated ids per string.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/ids.h"

namespace keel::test {

inline std::string slurp(const std::filesystem::path &p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::pair<std::string, std::vector<TokenId>>> read_vocab_vectors(
    const std::filesystem::path &inp, const std::filesystem::path &out) {
  const std::string text = slurp(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t hit = text.find(sep, pos);
    if (hit == std::string::npos) break;
    inputs.push_back(text.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  std::vector<std::pair<std::string, std::vector<TokenId>>> cases;
  std::istringstream lines(slurp(out));
  std::string line;
  for (const auto &in : inputs) {
    if (!std::getline(lines, line)) break;
    std::istringstream ids(line);
    std::vector<TokenId> v;
    TokenId id;
    while (ids >> id) v.push_back(id);
    cases.push_back({in, v});
  }
  return cases;
}

}  // namespace keel::test
