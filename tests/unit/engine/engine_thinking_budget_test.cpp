// A thinking budget in the engine: after `budget` tokens inside the think block the
// engine emits the end-of-thinking tokens in place of the sampled ones, and the model
// goes on from them (its next tokens follow the closed block). (That the fields cross IPC
// is tests/unit/ipc/messages_test.cpp.)
#include <gtest/gtest.h>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

const std::vector<TokenId> kEnd = {77, 78};

GenerationRequest thinking(std::uint64_t id, std::int32_t budget, int max_tokens) {
  GenerationRequest r = greedy_request(id, random_prompt(unsigned(id), 9), max_tokens);
  r.sampling.thinking_budget = budget;
  r.sampling.thinking_start = {76};
  r.sampling.thinking_end = kEnd;
  r.sampling.thinking_open = true;
  return r;
}

TEST(EngineThinkingBudget, ClosesTheBlockAndTheModelContinuesFromIt) {
  ToyEngine e(128, 4);
  Collector c;
  const GenerationRequest r = thinking(1, 3, 9);
  e->submit(r, c.sink());
  e->submit(greedy_request(2, random_prompt(2, 9), 6), c.sink());  // no budget beside it
  ASSERT_TRUE(c.wait_finished(2));
  const auto &out = c.get(1).tokens;
  ASSERT_EQ(out.size(), 9u);
  // Three tokens of thinking as the model writes them, then the end tokens.
  const auto thought = toy_greedy(r.prompt, 3, kToyVocab);
  EXPECT_EQ(std::vector<TokenId>(out.begin(), out.begin() + 3), thought);
  EXPECT_EQ(std::vector<TokenId>(out.begin() + 3, out.begin() + 5), kEnd);
  // The answer: what the model writes after its prompt, thoughts and the closed block.
  std::vector<TokenId> history = r.prompt;
  history.insert(history.end(), out.begin(), out.begin() + 5);
  EXPECT_EQ(std::vector<TokenId>(out.begin() + 5, out.end()), toy_greedy(history, 4, kToyVocab));
  EXPECT_EQ(c.get(2).tokens, toy_greedy(random_prompt(2, 9), 6, kToyVocab));
}

}  // namespace
}  // namespace keel::test
