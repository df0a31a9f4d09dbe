// The one max_tokens rule of every generating endpoint.
#include "server/context_budget.h"

#include <gtest/gtest.h>

#include "server/json_fields.h"

using namespace keel::server;

TEST(ContextBudget, AskedTokensThatFitAreKept) {
  EXPECT_EQ(fit_max_tokens(1024, 100, 50, "messages"), 50);
  EXPECT_EQ(fit_max_tokens(1024, 100, 924, "messages"), 924);
}

TEST(ContextBudget, TooManyAskedAreClampedToWhatIsLeft) {
  // Claude Code asks for 32,000 whatever the model.
  EXPECT_EQ(fit_max_tokens(16384, 12624, 32000, "messages"), 16384 - 12624);
  EXPECT_EQ(fit_max_tokens(1024, 1023, 5, "prompt"), 1);
}

TEST(ContextBudget, NoneAskedMeansAllThatIsLeft) {
  EXPECT_EQ(fit_max_tokens(1024, 24, std::nullopt, "messages"), 1000);
}

TEST(ContextBudget, APromptThatFillsTheContextIsA400NamingItsField) {
  for (std::size_t len : {1024u, 5000u}) {
    try {
      fit_max_tokens(1024, len, 1, "prompt");
      FAIL() << "no error for a prompt of " << len;
    } catch (const ApiErrorException &e) {
      EXPECT_EQ(e.error.status, 400);
      EXPECT_EQ(e.error.param, "prompt");
      EXPECT_NE(e.error.message.find("context length is 1024"), std::string::npos)
          << e.error.message;
    }
  }
  try {
    fit_max_tokens(16, 16, std::nullopt, "messages");
    FAIL();
  } catch (const ApiErrorException &e) {
    EXPECT_EQ(e.error.param, "messages");
  }
}

TEST(ContextBudget, UnknownContextLeavesTheRequestAsAsked) {
  EXPECT_EQ(fit_max_tokens(0, 5000, 7, "messages"), 7);
  EXPECT_EQ(fit_max_tokens(0, 5000, std::nullopt, "messages"), INT32_MAX);
}

TEST(ContextBudget, SeveralPromptsGetWhatTheLongestLeaves) {
  const std::vector<std::vector<keel::TokenId>> prompts{std::vector<keel::TokenId>(10, 1),
                                                        std::vector<keel::TokenId>(100, 2),
                                                        std::vector<keel::TokenId>(40, 3)};
  EXPECT_EQ(fit_max_tokens(128, prompts, 64, "prompt"), 28);
  EXPECT_EQ(fit_max_tokens(128, prompts, 5, "prompt"), 5);
  EXPECT_THROW(fit_max_tokens(100, prompts, 5, "prompt"), ApiErrorException);
}
