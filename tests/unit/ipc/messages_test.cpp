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

TEST(IpcMessages, MinTokensCrossesIpc) {
  GenerationRequest r = request(8);
  r.sampling.min_tokens = 5;
  EXPECT_EQ(ipc::decode_submit(ipc::encode_submit(r)).sampling.min_tokens, 5);
  EXPECT_EQ(ipc::decode_submit(ipc::encode_submit(request(9))).sampling.min_tokens, 0);
}

TEST(IpcMessages, FairnessGroupCrossesIpc) {
  GenerationRequest r = request(12);
  r.group = 10;
  EXPECT_EQ(ipc::decode_submit(ipc::encode_submit(r)).group, 10u);
  EXPECT_EQ(ipc::decode_submit(ipc::encode_submit(request(13))).group, 0u);
}

TEST(IpcMessages, LoadProgressCrossesIpc) {
  const LoadProgress p{"reading weights", 3 << 20, 8 << 20, "bytes"};
  const LoadProgress back = ipc::decode_progress(ipc::encode_progress(p));
  EXPECT_EQ(back, p);
  ASSERT_TRUE(back.fraction());
  EXPECT_DOUBLE_EQ(*back.fraction(), 0.375);
  const LoadProgress open = ipc::decode_progress(ipc::encode_progress({"uploading to device"}));
  EXPECT_EQ(open.phase, "uploading to device");
  EXPECT_FALSE(open.fraction());  // no total: no fraction to show
}

TEST(IpcMessages, MalformedLoadProgressIsAFormatError) {
  for (const char *bad :
       {"{}", "[1]", "{\"phase\": \"x\", \"done\": -1, \"total\": 2, \"unit\": \"\"}",
        "{\"phase\": \"\", \"done\": 0, \"total\": 0, \"unit\": \"\"}",
        "{\"phase\": 7, \"done\": 0, \"total\": 0, \"unit\": \"\"}", "not json"}) {
    try {
      ipc::decode_progress(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), ErrorCode::kFormat) << bad;
    }
  }
}

}  // namespace
}  // namespace keel
