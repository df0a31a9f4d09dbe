// `--speculative draft:PATH` (engine/draft_model_drafter.h) in the engine over the CPU
// runner and tiny random llama models (make_model): the target drafting for itself has
// its drafts accepted; with other drafts (a different random model, and one that shares
// the target's first layer) greedy output is token for token the output without drafts,
// alone, batched, with the prefix cache warm and under preemption; the drafter's own KV
// is truncated after a rejection and freed by forget(), a full pool drafts nothing; a
// vocabulary of another size, a bad path and runners that cannot draft so are refused
// naming the flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "core/error.h"
#include "cpu_engine_util.h"
#include "engine/draft_model_drafter.h"
#include "formats/make_model.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

// Tiny llama models made once per process: the target, a model of other random weights,
// one of the target's weights with only its first layer, one with another vocabulary.
std::filesystem::path model(const std::string &name, std::uint64_t seed, std::int64_t layers = 2,
                            std::int64_t vocab = 512) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("keel-engine-draft-" + std::to_string(::getpid())) / name;
  if (std::filesystem::exists(d / "config.json")) return d;
  MakeModelOptions o;
  o.arch = "llama";
  o.shape = "tiny";
  o.layers = layers;
  o.vocab = vocab;
  o.seed = seed;
  o.dtype = DType::kF32;
  o.out = d;
  o.threads = 2;
  make_model(o);
  return d;
}
const std::filesystem::path &target() {
  static const auto p = model("target", 5);
  return p;
}
const std::filesystem::path &other_draft() {
  static const auto p = model("other", 9);
  return p;
}
const std::filesystem::path &one_layer_draft() {
  static const auto p = model("one-layer", 5, 1);
  return p;
}

EngineConfig draft_config(const std::filesystem::path &draft, std::int32_t k = 4) {
  EngineConfig cfg = small_config(256, 16, 64);
  if (!draft.empty()) {
    cfg.speculative.method = parse_speculative_method("draft:" + draft.string());
    cfg.speculative.num_speculative_tokens = k;
    cfg.speculative.max_running = 0;   // draft at any batch size
    cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
  }
  return cfg;
}

std::vector<TokenId> prompt_of(int i) { return random_prompt(40 + i, 5 + (i * 13) % 40); }

std::map<int, std::vector<TokenId>> run(const std::filesystem::path &draft, int requests,
                                        int tokens, EngineStatus *status) {
  return run_greedy(target(), draft_config(draft), requests, tokens, prompt_of, status);
}

void expect_counters(const EngineStatus &s) {
  expect_spec_counters(s, "draft");
  EXPECT_GT(s.spec_draft_weights_bytes, 0);
  EXPECT_GT(s.spec_draft_kv_bytes, 0);
}

TEST(EngineDraftModel, TheTargetDraftingForItselfIsAccepted) {
  for (const int requests : {1, 4}) {
    EngineStatus s;
    const auto off = run({}, requests, 24, nullptr);
    const auto on = run(target(), requests, 24, &s);
    for (int i = 0; i < requests; ++i)
      EXPECT_EQ(on.at(i), off.at(i)) << "request " << i << " of " << requests;
    std::printf("self, %d requests: %lld drafted, %lld accepted\n", requests,
                static_cast<long long>(s.spec_drafted), static_cast<long long>(s.spec_accepted));
    expect_counters(s);
    // The same weights compute the same argmax (chunking aside): essentially all.
    EXPECT_GE(static_cast<double>(s.spec_accepted), 0.9 * static_cast<double>(s.spec_drafted));
  }
}

TEST(EngineDraftModel, OtherDraftsKeepTheOutputAloneAndBatched) {
  for (const auto &draft : {other_draft(), one_layer_draft()}) {
    for (const int requests : {1, 8}) {
      EngineStatus s;
      const auto off = run({}, requests, 24, nullptr);
      const auto on = run(draft, requests, 24, &s);
      for (int i = 0; i < requests; ++i)
        EXPECT_EQ(on.at(i), off.at(i))
            << draft.filename() << ", request " << i << " of " << requests;
      std::printf("%s, %d requests: %lld drafted, %lld accepted\n", draft.filename().c_str(),
                  requests, static_cast<long long>(s.spec_drafted),
                  static_cast<long long>(s.spec_accepted));
      expect_counters(s);
      EXPECT_LT(s.spec_accepted, s.spec_drafted);  // some rejected: truncated in both caches
    }
  }
}

TEST(EngineDraftModel, PrefixCacheHitsAndPreemptionKeepTheOutput) {
  // Every prompt shares 40 tokens: later requests start past cached target blocks (the
  // drafter computes them itself). 24 blocks of 16 for 8 requests of ~60 tokens:
  // preemptions in the target, and a draft pool (as large) too full for some.
  EngineStatus s;
  EXPECT_EQ(run_two_rounds(target(), draft_config(one_layer_draft()), 24, shared_prefix_prompt, &s),
            run_two_rounds(target(), draft_config({}), 24, shared_prefix_prompt));
  EXPECT_GT(s.spec_drafted, 0);
}

// The drafter alone: what its KV holds after a draft, after a rejection, and after
// forget; a full pool.
TEST(EngineDraftModel, DrafterTruncatesRejectedDraftsAndForgets) {
  ExecContext ctx(2);
  auto host = cpu::CpuModelRunner::open(target(), ctx, {64, 16});
  auto d = DraftModelDrafter::open(one_layer_draft(), *host, 8);
  ASSERT_EQ(d->pool().num_blocks(), 8);
  const RequestId id{5};
  const std::vector<TokenId> prompt = random_prompt(9, 14);
  std::vector<TokenId> draft;
  d->propose(id, prompt, 6, draft);
  ASSERT_EQ(draft.size(), 6u);
  // The prompt and every draft but the last: 19 positions, two blocks.
  std::vector<TokenId> held = prompt;
  held.insert(held.end(), draft.begin(), draft.end() - 1);
  EXPECT_EQ(d->held_tokens(id), held);
  EXPECT_EQ(d->pool().num_used(), 2);

  // The target took the first draft and then another token: the rest is truncated, and
  // the new drafts are those of a fresh drafter (no stale KV read).
  std::vector<TokenId> tokens = prompt;
  tokens.push_back(draft[0]);
  tokens.push_back((draft[1] + 1) % 100);
  std::vector<TokenId> again, fresh;
  d->propose(id, tokens, 2, again);
  auto d2 = DraftModelDrafter::open(one_layer_draft(), *host, 8);
  d2->propose(id, tokens, 2, fresh);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again, fresh);
  held = tokens;
  held.push_back(again[0]);
  EXPECT_EQ(d->held_tokens(id), held);  // 17 positions
  EXPECT_EQ(d->pool().num_used(), 2);

  // A shorter history that parts from the held one at position 10 (not just at its
  // last token): positions 10.. computed again, one block kept, the other freed.
  std::vector<TokenId> other(prompt.begin(), prompt.begin() + 13);
  other[10] = (other[10] + 1) % 100;
  std::vector<TokenId> third, third_fresh;
  d->propose(id, other, 2, third);
  auto d3 = DraftModelDrafter::open(one_layer_draft(), *host, 8);
  d3->propose(id, other, 2, third_fresh);
  EXPECT_EQ(third, third_fresh);
  EXPECT_EQ(d->held_tokens(id).size(), 14u);
  EXPECT_EQ(d->pool().num_used(), 1);

  // A request that needs more blocks than are free gets no drafts, and no error.
  const RequestId big{6};
  std::vector<TokenId> none;
  d->propose(big, random_prompt(10, 8 * 16), 4, none);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(d->pool().num_used(), 1);

  d->forget(id);
  d->forget(big);
  EXPECT_EQ(d->num_tracked(), 0u);
  EXPECT_EQ(d->pool().num_used(), 0);
  d->pool().check_invariants();
  // The pool is whole again: the long request fits now.
  d->propose(big, random_prompt(10, 7 * 16), 4, none);
  EXPECT_EQ(none.size(), 4u);
  EXPECT_EQ(d->pool().num_used(), 8);
}

TEST(EngineDraftModel, RefusalsNameTheFlag) {
  auto refused = [](auto make, const std::string &needle) {
    expect_refusal(make, "--speculative draft:", needle);
  };
  const auto missing = std::filesystem::temp_directory_path() / "keel-no-such-draft-model";
  refused([&] { parse_speculative_method("draft:" + missing.string()); },
          missing.string() + ": no such file or directory");
  refused([] { parse_speculative_method("draft:"); }, "draft:PATH");
  // A path that holds no model.
  const auto empty = target().parent_path() / "empty";
  std::filesystem::create_directories(empty);
  refused([&] { CpuEngine e(target(), draft_config(empty)); }, empty.string());
  // Another vocabulary: both sizes named.
  const auto wide = model("wide", 9, 1, 640);
  refused([&] { CpuEngine e(target(), draft_config(wide)); }, "has 640 tokens, the target's 512");
  // Runners that cannot run a draft model beside them.
  refused(
      [] { ToyEngine e(64, 4, draft_config(target()), [](ToyRunner &r) { r.verify = false; }); },
      "does not verify drafts");
  // A runner that verifies but cannot host a second model (ModelRunner's default).
  refused([] { ToyEngine e(64, 4, draft_config(target())); },
          "cannot run a second model beside it");
  // The canonical name is absolute, so an engine started elsewhere finds the model.
  EXPECT_EQ(parse_speculative_method("draft:" + target().string()),
            "draft:" + target().lexically_normal().string());
  EXPECT_EQ(draft_model_path("draft:/x/y"), std::filesystem::path("/x/y"));
  EXPECT_EQ(draft_model_path("ngram"), std::nullopt);
}

}  // namespace
}  // namespace keel::test
