// Editing a checkpoint on disk to break it, and the error its load then gets: the bad
// checkpoint tests of the formats module (MoE, GLM-4.5, gpt-oss, MXFP4) share these.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "formats/model_weights.h"

namespace keel::test {

inline std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::filesystem::path &p, const std::string &s) {
  std::ofstream(p, std::ios::binary) << s;
}

// The message of the format error that opening `path` (a directory or a file) raises,
// or "no error" (a failed expectation when the error is of another kind).
inline std::string open_error(const std::filesystem::path &path) {
  try {
    ModelWeights::open(path);
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    return e.what();
  }
  return "no error";
}

// Renames a tensor in the safetensors header in place (same length, so offsets hold).
inline void rename_tensor(const std::filesystem::path &file, const std::string &from,
                          const std::string &to) {
  ASSERT_EQ(from.size(), to.size());
  std::string bytes = slurp(file);
  const auto at = bytes.find("\"" + from + "\"");
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at + 1, from.size(), to);
  spit(file, bytes);
}

}  // namespace keel::test
