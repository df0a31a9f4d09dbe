// Where tests find shared test data, npm-installed files and the keel binary.
// Tests that need data that is absent call GTEST_SKIP() saying what is missing.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace keel::test {

inline std::filesystem::path source_dir() { return KEEL_SOURCE_DIR; }
inline std::filesystem::path keel_binary() { return KEEL_BINARY; }

// ../shared/testdata beside the checkout, or $KEEL_TESTDATA.
inline std::optional<std::filesystem::path> testdata_dir() {
  if (const char *env = std::getenv("KEEL_TESTDATA")) return std::filesystem::path(env);
  auto p = source_dir().parent_path() / "shared" / "testdata";
  if (std::filesystem::exists(p)) return p;
  return std::nullopt;
}

// tests/npm/node_modules, installed by scripts/setup.
inline std::optional<std::filesystem::path> npm_dir() {
  auto p = source_dir() / "tests" / "npm" / "node_modules";
  if (std::filesystem::exists(p)) return p;
  return std::nullopt;
}

inline std::filesystem::path fixtures_dir() { return source_dir() / "tests" / "fixtures"; }

}  // namespace keel::test
