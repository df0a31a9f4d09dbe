#pragma once

#include <random>
#include <vector>

#include "engine/engine_api.h"

namespace keel::test {

constexpr std::int32_t kToyVocab = 101;

inline GenerationRequest greedy_request(std::uint64_t id, std::vector<TokenId> prompt,
                                        int max_tokens) {
  GenerationRequest r;
  r.id = RequestId{id};
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  return r;
}

inline std::vector<TokenId> random_prompt(std::uint32_t seed, int len) {
  std::mt19937 rng(seed);
  std::vector<TokenId> p(len);
  for (auto &t : p) t = static_cast<TokenId>(rng() % kToyVocab);
  return p;
}

inline EngineConfig small_config(std::int32_t budget = 64, std::int32_t seqs = 32,
                                 std::int32_t chunk = 16, bool caching = true) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = seqs;
  c.scheduler.max_chunk_tokens = chunk;
  c.enable_prefix_caching = caching;
  c.idle_tick = std::chrono::milliseconds(5);
  return c;
}

}  // namespace keel::test
