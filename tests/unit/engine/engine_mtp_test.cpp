// `--speculative mtp` (engine/mtp_drafter.h) in the engine over the CPU runner and a tiny
// random GLM-4.5 (GQA) or DeepSeek-V3 (MLA) with an MTP layer (make_model --mtp-layers 1):
// greedy output is token for token the output without drafts, alone and batched and
// with prefix cache hits, the counters agree, the KV of rejected drafts is freed,
// forget() drops a request's state; runners and models that cannot draft this way refuse
// by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "core/error.h"
#include "cpu_engine_util.h"
#include "engine/mtp_drafter.h"
#include "formats/make_model.h"
#include "support/copying_mtp_layer.h"
#include "support/hidden_batch.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

// A tiny model of `arch` with one MTP layer, made once per process and arch.
std::filesystem::path mtp_model(const std::string &arch) {
  static std::map<std::string, std::filesystem::path> made;
  if (auto it = made.find(arch); it != made.end()) return it->second;
  const auto d = std::filesystem::temp_directory_path() /
                 ("keel-engine-mtp-" + arch + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  {
    MakeModelOptions o;
    o.arch = arch;
    o.shape = "tiny";
    o.layers = 2;
    o.mtp_layers = 1;
    o.dtype = DType::kF32;  // (rewritable: copying_mtp_model)
    o.seed = 3;
    o.out = d;
    o.threads = 2;
    make_model(o);
  }
  return made[arch] = d;
}

// mtp_model(arch) with its MTP layer rewired to copy the target
// (support/copying_mtp_layer.h): drafts repeat the last token.
std::filesystem::path copying_mtp_model(const std::string &arch) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("keel-engine-mtp-copy-" + arch + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::copy(mtp_model(arch), d);
  make_mtp_layer_copying(d / "model.safetensors", 2);  // the MTP layer of the 2-layer model
  return d;
}

EngineConfig mtp_config(bool on, std::int32_t k = 3) {
  EngineConfig cfg = small_config(256, 16, 64);
  if (on) {
    cfg.speculative.method = "mtp";
    cfg.speculative.num_speculative_tokens = k;
    cfg.speculative.max_running = 0;   // draft at any batch size
    cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
  }
  return cfg;
}

std::vector<TokenId> prompt_of(int i) { return random_prompt(40 + i, 5 + (i * 13) % 40); }

class EngineMtp : public ::testing::TestWithParam<const char *> {
 protected:
  std::filesystem::path model() const { return mtp_model(GetParam()); }
  std::map<int, std::vector<TokenId>> run(bool on, int requests, int tokens,
                                          EngineStatus *status) const {
    return run_greedy(model(), mtp_config(on), requests, tokens, prompt_of, status);
  }
};

INSTANTIATE_TEST_SUITE_P(Models, EngineMtp, ::testing::Values("glm4_moe", "deepseek_v3"),
                         [](const auto &info) { return std::string(info.param); });

TEST_P(EngineMtp, GreedyOutputIsTheSameAloneAndBatched) {
  for (const int requests : {1, 6}) {
    EngineStatus s;
    const auto off = run(false, requests, 24, nullptr);
    const auto on = run(true, requests, 24, &s);
    for (int i = 0; i < requests; ++i)
      EXPECT_EQ(on.at(i), off.at(i)) << "request " << i << " of " << requests;
    std::printf("%d requests: %lld drafted, %lld accepted\n", requests,
                static_cast<long long>(s.spec_drafted), static_cast<long long>(s.spec_accepted));
    expect_spec_counters(s, "mtp");
  }
}

TEST_P(EngineMtp, PrefixCacheHitsAndPreemptionKeepTheOutput) {
  // Every prompt shares 40 tokens: later requests start past cached blocks, whose
  // positions bring the drafter no hidden state (zero rows stand in). 24 blocks of 16
  // for 8 requests of ~60 tokens: preemptions too.
  EngineStatus s;
  EXPECT_EQ(run_two_rounds(model(), mtp_config(true), 24, shared_prefix_prompt, &s),
            run_two_rounds(model(), mtp_config(false), 24, shared_prefix_prompt));
  EXPECT_GT(s.prefix_hit_tokens, 0);
  EXPECT_GT(s.spec_drafted, 0);
}

TEST_P(EngineMtp, AcceptedDraftsKeepTheOutput) {
  const auto dir = copying_mtp_model(GetParam());
  std::int64_t accepted = 0;
  for (const int requests : {1, 4}) {
    EngineStatus s;
    const auto off = run_greedy(dir, mtp_config(false), requests, 32, prompt_of, nullptr);
    const auto on = run_greedy(dir, mtp_config(true), requests, 32, prompt_of, &s);
    for (int i = 0; i < requests; ++i)
      EXPECT_EQ(on.at(i), off.at(i)) << "request " << i << " of " << requests;
    std::printf("copying head, %d requests: %lld drafted, %lld accepted\n", requests,
                static_cast<long long>(s.spec_drafted), static_cast<long long>(s.spec_accepted));
    expect_spec_counters(s, "mtp");
    accepted += s.spec_accepted;
  }
  // ... and over prefix cache hits and preemptions (as PrefixCacheHitsAndPreemption...).
  EngineStatus s;
  EXPECT_EQ(run_two_rounds(dir, mtp_config(true), 24, shared_prefix_prompt, &s),
            run_two_rounds(dir, mtp_config(false), 24, shared_prefix_prompt));
  EXPECT_GT(s.prefix_hit_tokens, 0);
  accepted += s.spec_accepted;
  EXPECT_GT(accepted, 0);  // drafts were kept, not only rejected
  std::filesystem::remove_all(dir);
}

TEST_P(EngineMtp, DrafterFollowsTheTargetAndForgets) {
  // The drafter alone over the runner: hidden rows of a prefill, a draft, a rejected
  // detour, and forget.
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(model(), ctx, {64, 16});
  runner->load_mtp();
  MtpDrafter d(*runner);
  const std::size_t hidden = static_cast<std::size_t>(runner->config().hidden_size);
  std::vector<TokenId> tokens = random_prompt(9, 12);
  const ForwardBatch b = keel::test::hidden_batch(tokens);
  ForwardOutput out;
  runner->forward(b, out);
  ASSERT_EQ(out.hidden.size(), tokens.size() * hidden);
  const RequestId id{5};
  d.observe_hidden(id, tokens, 0, b.seqs[0].num_tokens, out.hidden);
  // Positions 0..10 (next tokens known) consumed at once: one row held.
  EXPECT_EQ(d.pending_rows(id), 1);
  tokens.push_back(7);  // the sampled token: position 11 runs through the head
  std::vector<TokenId> draft;
  d.propose(id, tokens, 3, draft);
  EXPECT_EQ(draft.size(), 3u);
  EXPECT_EQ(d.pending_rows(id), 0);
  // Proposing again with nothing new computed: no draft (no hidden row for position 12).
  std::vector<TokenId> again;
  tokens.push_back(draft[0]);
  d.propose(id, tokens, 3, again);
  EXPECT_TRUE(again.empty());
  // The same draft from a fresh drafter over the same rows: deterministic.
  MtpDrafter d2(*runner);
  tokens.pop_back();
  d2.observe_hidden(id, std::span<const TokenId>(tokens).first(12), 0, b.seqs[0].num_tokens,
                    out.hidden);
  std::vector<TokenId> draft2;
  d2.propose(id, tokens, 3, draft2);
  EXPECT_EQ(draft2, draft);
  // ... and the one computed directly: positions 0..11 in one step (h_t, x_{t+1}), then
  // two chained steps on h' and the guess.
  {
    MtpCache cache;
    MtpOutput o;
    MtpInput in;
    in.hidden = out.hidden;
    in.tokens = std::span<const TokenId>(tokens).subspan(1, 12);
    runner->mtp_forward(cache, in, o);
    std::vector<TokenId> want{o.argmax.back()};
    std::vector<float> h(o.hidden.end() - static_cast<std::ptrdiff_t>(hidden), o.hidden.end());
    for (int i = 1; i < 3; ++i) {
      MtpInput c;
      c.start_pos = cache.length;
      c.hidden = h;
      c.chained = true;
      c.tokens = std::span<const TokenId>(&want.back(), 1);
      runner->mtp_forward(cache, c, o);
      h = o.hidden;
      want.push_back(o.argmax.back());
    }
    EXPECT_EQ(draft, want);
  }
  EXPECT_EQ(d.num_tracked(), 1u);
  d.forget(id);
  EXPECT_EQ(d.num_tracked(), 0u);
}

TEST(EngineMtpRefusal, RefusesRunnersAndModelsThatCannotDraftSo) {
  auto refused = [](auto make, const std::string &needle) {
    expect_refusal(make, "--speculative mtp", needle);
  };
  // A runner that does not verify drafts (as tensor parallelism today).
  refused([] { ToyEngine e(64, 4, mtp_config(true), [](ToyRunner &r) { r.verify = false; }); },
          "does not verify drafts");
  // One that verifies but has no MTP layer to run.
  refused([] { ToyEngine e(64, 4, mtp_config(true)); }, "cannot run MTP heads");
  EXPECT_EQ(parse_speculative_method("mtp"), "mtp");
}

}  // namespace
}  // namespace keel::test
