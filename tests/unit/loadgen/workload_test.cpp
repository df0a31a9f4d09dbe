#include "loadgen/workload.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "loadgen/openai_wire.h"

namespace keel::loadgen {
namespace {

WorkloadOptions opts(WorkloadKind kind) {
  WorkloadOptions o;
  o.kind = kind;
  o.num_prompts = 40;
  o.input_len = 64;
  o.output_len = 8;
  o.seed = 11;
  return o;
}

TEST(Workload, FixedHasExactLengthsAndIdsInRange) {
  auto o = opts(WorkloadKind::kFixed);
  o.min_token_id = 10;
  o.max_token_id = 20;
  const Workload w = make_workload(o);
  ASSERT_EQ(w.sessions.size(), 40u);
  EXPECT_EQ(w.total_turns(), 40);
  for (const auto &s : w.sessions) {
    ASSERT_EQ(s.turns.size(), 1u);
    EXPECT_FALSE(s.chat);
    EXPECT_EQ(s.turns[0].prompt_ids.size(), 64u);
    EXPECT_EQ(s.turns[0].max_tokens, 8);
    for (int id : s.turns[0].prompt_ids) {
      EXPECT_GE(id, 10);
      EXPECT_LT(id, 20);
    }
  }
}

TEST(Workload, RandomLengthsStayInRangeAndVary) {
  auto o = opts(WorkloadKind::kRandom);
  o.range_ratio = 0.25;
  const Workload w = make_workload(o);
  std::set<std::size_t> lens;
  for (const auto &s : w.sessions) {
    const std::size_t n = s.turns[0].prompt_ids.size();
    EXPECT_GE(n, 48u);
    EXPECT_LE(n, 80u);
    lens.insert(n);
  }
  EXPECT_GT(lens.size(), 5u);
}

TEST(Workload, SameSeedSamePromptsOtherSeedOthers) {
  auto o = opts(WorkloadKind::kRandom);
  const Workload a = make_workload(o), b = make_workload(o);
  o.seed = 12;
  const Workload c = make_workload(o);
  EXPECT_EQ(a.sessions[5].turns[0].prompt_ids, b.sessions[5].turns[0].prompt_ids);
  EXPECT_NE(a.sessions[5].turns[0].prompt_ids, c.sessions[5].turns[0].prompt_ids);
}

TEST(Workload, SharedPrefixPromptsShareTheirGroupsPrefix) {
  auto o = opts(WorkloadKind::kSharedPrefix);
  o.num_prefixes = 3;
  o.prefix_len = 48;
  const Workload w = make_workload(o);
  std::vector<std::vector<int>> prefix(3);
  std::set<std::vector<int>> tails;
  for (const auto &s : w.sessions) {
    ASSERT_GE(s.prefix_group, 0);
    ASSERT_LT(s.prefix_group, 3);
    const auto &ids = s.turns[0].prompt_ids;
    ASSERT_EQ(ids.size(), 64u);
    std::vector<int> head(ids.begin(), ids.begin() + 48);
    if (prefix[s.prefix_group].empty()) prefix[s.prefix_group] = head;
    EXPECT_EQ(head, prefix[s.prefix_group]);
    tails.insert(std::vector<int>(ids.begin() + 48, ids.end()));
  }
  EXPECT_NE(prefix[0], prefix[1]);
  EXPECT_EQ(tails.size(), 40u);  // every prompt has its own tail
}

TEST(Workload, SharedPrefixInTextStartsWithTheSameWords) {
  auto o = opts(WorkloadKind::kSharedPrefix);
  o.token_prompts = false;
  o.num_prefixes = 1;
  const Workload w = make_workload(o);
  const std::string &first = w.sessions[0].turns[0].prompt_text;
  const std::string head = first.substr(0, first.size() / 2);
  for (const auto &s : w.sessions) {
    EXPECT_TRUE(s.turns[0].prompt_ids.empty());
    EXPECT_EQ(s.turns[0].prompt_text.rfind(head, 0), 0u);
  }
}

TEST(Workload, AgentSessionsCoverEveryPromptAndHistoryGrows) {
  auto o = opts(WorkloadKind::kAgent);
  o.num_prompts = 10;
  o.turns = 4;
  const Workload w = make_workload(o);
  ASSERT_EQ(w.sessions.size(), 3u);  // 4 + 4 + 2
  EXPECT_EQ(w.total_turns(), 10);
  EXPECT_EQ(w.sessions[2].turns.size(), 2u);
  EXPECT_EQ(w.sessions[0].system_prompt, w.sessions[1].system_prompt);
  const Session &s = w.sessions[0];
  ASSERT_TRUE(s.chat);
  EXPECT_STREQ(request_path(s), "/v1/chat/completions");
  const std::vector<std::string> replies = {"first reply", "second reply"};
  const auto b0 = request_body(s, 0, replies, "m");
  const auto b2 = request_body(s, 2, replies, "m");
  ASSERT_EQ(b0["messages"].size(), 2u);  // system, user
  ASSERT_EQ(b2["messages"].size(), 6u);  // system, (user, assistant) x2, user
  EXPECT_EQ(b2["messages"][2]["role"], "assistant");
  EXPECT_EQ(b2["messages"][2]["content"], "first reply");
  EXPECT_EQ(b2["messages"][5]["content"], s.turns[2].prompt_text);
  EXPECT_GT(b2.dump().size(), b0.dump().size());
}

TEST(Workload, CompletionBodyStreamsWithUsage) {
  const Workload w = make_workload(opts(WorkloadKind::kFixed));
  const auto b = request_body(w.sessions[0], 0, {}, "tiny");
  EXPECT_EQ(b["model"], "tiny");
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["max_tokens"], 8);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["prompt"].size(), 64u);
}

TEST(Workload, RejectsBadOptions) {
  auto o = opts(WorkloadKind::kRandom);
  o.num_prompts = 0;
  EXPECT_THROW(make_workload(o), Error);
  o = opts(WorkloadKind::kRandom);
  o.range_ratio = 1.0;
  EXPECT_THROW(make_workload(o), Error);
  o = opts(WorkloadKind::kRandom);
  o.max_token_id = o.min_token_id;
  EXPECT_THROW(make_workload(o), Error);
  EXPECT_THROW(parse_workload_kind("sharedprefix"), Error);
  EXPECT_EQ(parse_workload_kind("shared-prefix"), WorkloadKind::kSharedPrefix);
}

}  // namespace
}  // namespace keel::loadgen
