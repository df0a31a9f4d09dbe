// Messages across the engine's process boundary: what the front sends arrives whole.
#include "engine/ipc/messages.h"

#include <gtest/gtest.h>

namespace keel {
namespace {

GenerationRequest request(std::uint64_t id) {
  GenerationRequest r;
  r.id = RequestId{id};
  r.prompt = {1, 2, 3};
  r.sampling.max_tokens = 7;
  return r;
}

TEST(IpcMessages, ConstraintFieldsCrossIpc) {
  GenerationRequest r = request(5);
  r.sampling.constraint_kind = "json_schema";
  r.sampling.constraint_text = "{\"type\": \"object\"}";
  GenerationRequest back = ipc::decode_submit(ipc::encode_submit(r));
  EXPECT_EQ(back.id, r.id);
  EXPECT_EQ(back.prompt, r.prompt);
  EXPECT_EQ(back.sampling.max_tokens, 7);
  EXPECT_EQ(back.sampling.constraint_kind, "json_schema");
  EXPECT_EQ(back.sampling.constraint_text, "{\"type\": \"object\"}");
  GenerationRequest none = ipc::decode_submit(ipc::encode_submit(request(6)));
  EXPECT_TRUE(none.sampling.constraint_kind.empty());
}

TEST(IpcMessages, ThinkingBudgetFieldsCrossIpc) {
  GenerationRequest r = request(3);
  r.sampling.thinking_budget = 5;
  r.sampling.thinking_start = {76};
  r.sampling.thinking_end = {77, 78};
  r.sampling.thinking_open = true;
  const GenerationRequest back = ipc::decode_submit(ipc::encode_submit(r));
  EXPECT_EQ(back.sampling.thinking_budget, 5);
  EXPECT_EQ(back.sampling.thinking_start, std::vector<TokenId>{76});
  EXPECT_EQ(back.sampling.thinking_end, (std::vector<TokenId>{77, 78}));
  EXPECT_TRUE(back.sampling.thinking_open);
  const GenerationRequest none = ipc::decode_submit(ipc::encode_submit(request(4)));
  EXPECT_LT(none.sampling.thinking_budget, 0);
}

}  // namespace
}  // namespace keel
