// `--speculative eagle3:PATH` (engine/eagle3_drafter.h) in the engine over the CPU runner,
// a tiny random llama target (make_model) and tiny random EAGLE-3 heads
// (make_eagle3_head): greedy output is token for token the output without drafts, alone,
// batched and with prefix cache hits and preemptions; a head wired to copy the target's
// prediction has drafts accepted; the drafter holds one step's aux rows and its own cache
// of consumed positions only, and forget() drops a request; heads with a missing tensor,
// another hidden size, a d2t of another length or an fc of another width, and runners
// that cannot run a head, are refused naming the flag and the fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "core/error.h"
#include "cpu_engine_util.h"
#include "engine/eagle3_drafter.h"
#include "exec/arch/eagle3_head.h"
#include "exec/arch/weight_binding.h"
#include "formats/make_eagle3_head.h"
#include "formats/make_model.h"
#include "support/copying_eagle3_head.h"
#include "support/hidden_batch.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

std::filesystem::path scratch() {
  return std::filesystem::temp_directory_path() /
         ("keel-engine-eagle3-" + std::to_string(::getpid()));
}

const std::filesystem::path &target() {
  static const auto d = [] {
    const auto p = scratch() / "target";
    std::filesystem::remove_all(p);
    MakeModelOptions o;
    o.arch = "llama";
    o.shape = "tiny";
    o.layers = 2;
    o.seed = 5;
    o.dtype = DType::kF32;
    o.out = p;
    o.threads = 2;
    make_model(o);
    return p;
  }();
  return d;
}

ModelConfig target_config() {
  ExecContext ctx(1);
  return cpu::CpuModelRunner::open(target(), ctx, {4, 16})->config();
}

// A head for target() made with `edit` applied to the options.
std::filesystem::path head(const std::string &name,
                           const std::function<void(MakeEagle3Options &)> &edit = {}) {
  MakeEagle3Options o;
  o.target = target_config();
  o.seed = 11;
  o.out = scratch() / name;
  std::filesystem::remove_all(o.out);
  if (edit) edit(o);
  make_eagle3_head(o);
  return o.out;
}

const std::filesystem::path &random_head() {
  static const auto p = head("random");
  return p;
}

// A head whose guess is the target's own prediction at the position before: fc passes the
// last aux row (the target's last layer's output, i.e. its final hidden state) through,
// the block adds nothing (o_proj and down_proj zero), norm and lm_head are the target's,
// and the draft vocabulary is the whole one (d2t zero). Its drafts repeat the last token,
// which the target's repetitions accept.
const std::filesystem::path &copying_head() {
  static const auto p = head("copying", [](MakeEagle3Options &o) {
    ExecContext ctx(1);
    auto runner = cpu::CpuModelRunner::open(target(), ctx, {4, 16});
    make_copying(o, arch::tensor_f32(runner->model().lm_head()));
  });
  return p;
}

EngineConfig eagle3_config(const std::filesystem::path &h, std::int32_t k = 3) {
  EngineConfig cfg = small_config(256, 16, 64);
  if (!h.empty()) {
    cfg.speculative.method = parse_speculative_method("eagle3:" + h.string());
    cfg.speculative.num_speculative_tokens = k;
    cfg.speculative.max_running = 0;   // draft at any batch size
    cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
  }
  return cfg;
}

std::vector<TokenId> prompt_of(int i) { return random_prompt(40 + i, 5 + (i * 13) % 40); }

TEST(EngineEagle3, GreedyOutputIsTheSameAloneAndBatched) {
  for (const int requests : {1, 6}) {
    EngineStatus s;
    const auto off = run_greedy(target(), eagle3_config({}), requests, 24, prompt_of);
    const auto on = run_greedy(target(), eagle3_config(random_head()), requests, 24, prompt_of, &s);
    for (int i = 0; i < requests; ++i)
      EXPECT_EQ(on.at(i), off.at(i)) << "request " << i << " of " << requests;
    std::printf("random head, %d requests: %lld drafted, %lld accepted\n", requests,
                static_cast<long long>(s.spec_drafted), static_cast<long long>(s.spec_accepted));
    expect_spec_counters(s, "eagle3");
    EXPECT_GT(s.spec_draft_weights_bytes, 0);
  }
}

TEST(EngineEagle3, PrefixCacheHitsAndPreemptionKeepTheOutput) {
  // Every prompt shares 40 tokens: later requests start past cached blocks, whose positions
  // bring the drafter no aux rows (zero rows stand in). 24 blocks of 16 for 8 requests of
  // ~60 tokens: preemptions too.
  for (const auto &h : {random_head(), copying_head()}) {
    EngineStatus s;
    EXPECT_EQ(run_two_rounds(target(), eagle3_config(h), 24, shared_prefix_prompt, &s),
              run_two_rounds(target(), eagle3_config({}), 24, shared_prefix_prompt))
        << h.filename();
    EXPECT_GT(s.prefix_hit_tokens, 0);
    EXPECT_GT(s.spec_drafted, 0);
  }
}

TEST(EngineEagle3, AcceptedDraftsKeepTheOutput) {
  std::int64_t accepted = 0;
  for (const int requests : {1, 4}) {
    EngineStatus s;
    const auto off = run_greedy(target(), eagle3_config({}), requests, 32, prompt_of);
    const auto on =
        run_greedy(target(), eagle3_config(copying_head()), requests, 32, prompt_of, &s);
    for (int i = 0; i < requests; ++i)
      EXPECT_EQ(on.at(i), off.at(i)) << "request " << i << " of " << requests;
    std::printf("copying head, %d requests: %lld drafted, %lld accepted\n", requests,
                static_cast<long long>(s.spec_drafted), static_cast<long long>(s.spec_accepted));
    expect_spec_counters(s, "eagle3");
    accepted += s.spec_accepted;
  }
  EXPECT_GT(accepted, 0);  // drafts were kept, not only rejected
}

// The drafter alone over the runner: aux rows of a prefill, a draft, a second proposal
// with nothing new computed, the same drafts from a fresh drafter and from the head
// directly, and forget.
TEST(EngineEagle3, DrafterFollowsTheTargetAndForgets) {
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(target(), ctx, {64, 16});
  auto d = Eagle3Drafter::open(random_head(), *runner);
  const std::vector<std::int32_t> layers = d->hidden_layers();
  ASSERT_EQ(layers, (std::vector<std::int32_t>{0, 1, 1}));  // make_eagle3_head's for 2 layers
  const std::size_t width = 3 * static_cast<std::size_t>(runner->config().hidden_size);
  std::vector<TokenId> tokens = random_prompt(9, 12);
  const ForwardBatch b = keel::test::hidden_batch(tokens, layers);
  ForwardOutput out;
  runner->forward(b, out);
  ASSERT_EQ(out.hidden.size(), tokens.size() * width);
  const RequestId id{5};
  d->observe_hidden(id, tokens, 0, b.seqs[0].num_tokens, out.hidden);
  // Positions 0..10 (next tokens known) consumed at once: one row held.
  EXPECT_EQ(d->pending_rows(id), 1);
  EXPECT_EQ(d->cached_positions(id), 11);
  tokens.push_back(7);  // the sampled token: position 11 runs through the lm_head
  std::vector<TokenId> draft;
  d->propose(id, tokens, 3, draft);
  ASSERT_EQ(draft.size(), 3u);
  EXPECT_EQ(d->pending_rows(id), 0);
  EXPECT_EQ(d->cached_positions(id), 12);  // chained positions dropped
  const Eagle3Config &hc = d->head().config();
  EXPECT_GE(d->kv_bytes(),
            static_cast<std::int64_t>(12 * 2 * hc.layer.num_kv_heads * hc.layer.head_dim * 4));
  for (const TokenId t : draft) {  // target ids of the draft vocabulary
    EXPECT_GE(t, 0);
    EXPECT_LT(t, runner->config().vocab_size);
  }
  // Proposing again with nothing new computed: no draft (no aux row for position 12).
  std::vector<TokenId> again;
  tokens.push_back(draft[0]);
  d->propose(id, tokens, 3, again);
  EXPECT_TRUE(again.empty());
  tokens.pop_back();
  // A fresh drafter over the same rows: the same drafts.
  auto d2 = Eagle3Drafter::open(random_head(), *runner);
  d2->observe_hidden(id, std::span<const TokenId>(tokens).first(12), 0, b.seqs[0].num_tokens,
                     out.hidden);
  std::vector<TokenId> draft2;
  d2->propose(id, tokens, 3, draft2);
  EXPECT_EQ(draft2, draft);
  // ... and the head directly: positions 0..11 in one step (aux rows, x_{t+1}), then two
  // chained steps on h' and the guess.
  {
    arch::Eagle3Head h(random_head(), runner->config(), runner->model().embed());
    MtpCache cache;
    MtpOutput o;
    MtpInput in;
    in.hidden = out.hidden;
    in.tokens = std::span<const TokenId>(tokens).subspan(1, 12);
    h.forward(cache, in, o, ctx);
    std::vector<TokenId> want{o.argmax.back()};
    const auto H = static_cast<std::ptrdiff_t>(h.hidden_size());
    std::vector<float> hp(o.hidden.end() - H, o.hidden.end());
    for (int i = 1; i < 3; ++i) {
      MtpInput c;
      c.start_pos = cache.length;
      c.hidden = hp;
      c.chained = true;
      c.tokens = std::span<const TokenId>(&want.back(), 1);
      h.forward(cache, c, o, ctx);
      hp = o.hidden;
      want.push_back(o.argmax.back());
    }
    EXPECT_EQ(draft, want);
  }
  // Rows of a request whose prefix was cached (positions 0..7 never computed): zeros stand
  // in, and the state stays bounded: one pending row after each step.
  const RequestId cached{6};
  std::vector<TokenId> t2 = random_prompt(10, 12);
  d->observe_hidden(cached, t2, 8, 4,
                    std::span<const float>(out.hidden).subspan(8 * width, 4 * width));
  EXPECT_EQ(d->pending_rows(cached), 1);
  EXPECT_EQ(d->cached_positions(cached), 11);
  EXPECT_EQ(d->num_tracked(), 2u);
  d->forget(id);
  d->forget(cached);
  EXPECT_EQ(d->num_tracked(), 0u);
  EXPECT_EQ(d->kv_bytes(), 0);
}

// End to end through the seam: the copying head's first draft is the target's own
// prediction at position n - 2 (the argmax of its logits there), read from the last aux
// layer's rows (the target's final hidden state) through fc, norm, lm_head and d2t. A
// head fed the layers in another order, or another layer's rows, drafts something else.
TEST(EngineEagle3, CopyingHeadDraftsTheTargetsPrediction) {
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(target(), ctx, {64, 16});
  auto d = Eagle3Drafter::open(copying_head(), *runner);
  const std::int64_t V = runner->config().vocab_size;
  int differs = 0;
  for (int p = 0; p < 6; ++p) {
    std::vector<TokenId> tokens = random_prompt(30 + p, 9 + p);
    const ForwardBatch b =
        keel::test::hidden_batch(tokens, d->hidden_layers(), SequenceSlice::Logits::kAll);
    ForwardOutput out;
    runner->forward(b, out);
    const RequestId id{static_cast<std::uint64_t>(100 + p)};
    d->observe_hidden(id, tokens, 0, b.seqs[0].num_tokens, out.hidden);
    const std::size_t row = tokens.size() - 1;  // the last prompt position: predicts x_m
    const float *logits = out.logits.data() + row * V;
    const auto want = static_cast<TokenId>(std::max_element(logits, logits + V) - logits);
    // Any sampled x_m: the draft at position m - 1 (aux rows, x_m) is the target's argmax there.
    tokens.push_back((want + 1 + p) % static_cast<TokenId>(V));
    std::vector<TokenId> draft;
    d->propose(id, tokens, 2, draft);
    ASSERT_EQ(draft.size(), 2u);
    EXPECT_EQ(draft[0], want) << "prompt " << p;
    EXPECT_EQ(draft[1], want) << "prompt " << p;  // h' == g: the chain repeats it
    differs += want != tokens[row];
    d->forget(id);
  }
  EXPECT_GT(differs, 0);  // not merely repeating the prompt's last token
}

// A head whose cache holds `cap` positions (as a device head's pool does): past them it
// throws Error(kResourceExhausted) before changing anything. Its guess: the last token + 1.
class CappedHead final : public Eagle3Runner {
 public:
  explicit CappedHead(std::int32_t cap) : cap_(cap) {
    cfg_.layer.hidden_size = 4;
    cfg_.target_hidden_size = 4;
    cfg_.draft_vocab_size = 8;
  }
  const Eagle3Config &config() const override { return cfg_; }
  const std::vector<std::int32_t> &aux_layers() const override { return aux_; }
  std::int64_t weights_bytes() const override { return 0; }
  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) override {
    const auto n = static_cast<std::int32_t>(in.tokens.size());
    if (in.start_pos + n > cap_) throw Error(ErrorCode::kResourceExhausted, "capped head: full");
    cache.length = in.start_pos + n;
    cache.rows.assign(static_cast<std::size_t>(cache.length), 0.0f);
    out.hidden.assign(static_cast<std::size_t>(n) * 4, 0.0f);
    out.argmax.clear();
    if (in.head != MtpInput::Head::kNone) out.argmax.push_back(in.tokens.back() + 1);
  }
  void truncate(MtpCache &cache, std::int32_t kept) override { cache.length = kept; }

 private:
  Eagle3Config cfg_;
  std::vector<std::int32_t> aux_{0};
  std::int32_t cap_;
};

// A request whose head cache cannot grow gets no more drafts (and holds nothing) until it
// ends; the others are not affected.
TEST(EngineEagle3, AHeadCacheThatCannotGrowEndsTheRequestsDrafts) {
  Eagle3Drafter d(std::make_unique<CappedHead>(10));
  const RequestId a{1}, b{2};
  std::vector<TokenId> tokens{1, 2, 3, 4, 5, 6};
  const std::vector<float> rows(16 * 4, 0.0f);
  auto rows_of = [&](std::int32_t n) { return std::span<const float>(rows).first(n * 4); };
  d.observe_hidden(a, tokens, 0, 6, rows_of(6));
  d.observe_hidden(b, tokens, 0, 6, rows_of(6));
  EXPECT_EQ(d.cached_positions(a), 5);
  tokens.push_back(7);
  std::vector<TokenId> draft;
  d.propose(a, tokens, 4, draft);  // position 5, then chained 6, 7, 8: within the 10
  EXPECT_EQ(draft, (std::vector<TokenId>{8, 9, 10, 11}));
  EXPECT_EQ(d.cached_positions(a), 6);
  // The next step's rows (positions 6..10, all five next tokens known) reach past the
  // cache: the request is refused from now on.
  for (const TokenId t : {8, 9, 10, 11, 12}) tokens.push_back(t);
  d.observe_hidden(a, tokens, 6, 5, rows_of(5));
  EXPECT_EQ(d.cached_positions(a), 0);
  EXPECT_EQ(d.pending_rows(a), 0);
  draft.clear();
  d.propose(a, tokens, 4, draft);
  EXPECT_TRUE(draft.empty());
  d.observe_hidden(a, tokens, 11, 1, rows_of(1));
  EXPECT_EQ(d.pending_rows(a), 0);
  // b drafts as before, and a chain that runs out of room keeps the drafts made so far.
  std::vector<TokenId> tb{1, 2, 3, 4, 5, 6, 7};
  d.propose(b, tb, 8, draft);
  EXPECT_EQ(draft, (std::vector<TokenId>{8, 9, 10, 11, 12}));  // chained 6..9 fit
  EXPECT_EQ(d.cached_positions(b), 0);                         // refused at chained position 10
  EXPECT_EQ(d.num_tracked(), 2u);
  d.forget(a);
  d.forget(b);
  EXPECT_EQ(d.num_tracked(), 0u);
}

TEST(EngineEagle3, BadHeadsAreRefusedNamingTheFault) {
  auto refused = [](const std::filesystem::path &h, const std::string &needle) {
    expect_refusal([&] { CpuEngine e(target(), eagle3_config(h)); },
                   "--speculative eagle3:", needle);
  };
  refused(head("no-hidden-norm",
               [](MakeEagle3Options &o) { o.omit_tensor = "midlayer.hidden_norm.weight"; }),
          "midlayer.hidden_norm.weight: tensor missing");
  refused(head("no-d2t", [](MakeEagle3Options &o) { o.omit_tensor = "d2t"; }),
          "d2t: tensor missing");
  refused(head("hidden-48", [](MakeEagle3Options &o) { o.hidden = 48; }),
          "hidden_size 48 is not the target's 64");
  refused(head("d2t-100", [](MakeEagle3Options &o) { o.d2t_length = 100; }),
          "d2t: shape [100] where [256] (draft_vocab_size) was expected");
  refused(head("fc-128", [](MakeEagle3Options &o) { o.fc_inputs = 128; }),
          "fc.weight: shape [64,128,] where [64,192,] was expected");
  refused(head("aux-9",
               [](MakeEagle3Options &o) {
                 o.aux_layers = {0, 1, 9};
               }),
          "layer 9 is outside the target's 2 layers");
  // Weights as a PyTorch pickle (as some releases ship them): named, not guessed at.
  const auto pickle = head("pickle");
  std::filesystem::rename(pickle / "model.safetensors", pickle / "pytorch_model.bin");
  refused(pickle, "keel reads safetensors only");
  // Not a head: a model directory.
  refused(target(), "is not an EAGLE-3 head");
}

TEST(EngineEagle3, RefusesRunnersThatCannotRunAHead) {
  auto refused = [](auto make, const std::string &needle) {
    expect_refusal(make, "--speculative eagle3:", needle);
  };
  const auto missing = scratch() / "no-such-head";
  refused([&] { parse_speculative_method("eagle3:" + missing.string()); },
          missing.string() + ": no such file or directory");
  refused([] { parse_speculative_method("eagle3:"); }, "eagle3:PATH");
  // A runner that does not verify drafts (as tensor parallelism today) and one that cannot
  // run a head.
  refused(
      [] {
        ToyEngine e(64, 4, eagle3_config(random_head()), [](ToyRunner &r) { r.verify = false; });
      },
      "does not verify drafts");
  refused([] { ToyEngine e(64, 4, eagle3_config(random_head())); },
          "this runner cannot run an EAGLE-3 head");
  EXPECT_EQ(parse_speculative_method("eagle3:" + random_head().string()),
            "eagle3:" + random_head().lexically_normal().string());
  EXPECT_EQ(eagle3_head_path("eagle3:/x/y"), std::filesystem::path("/x/y"));
  EXPECT_EQ(eagle3_head_path("draft:/x/y"), std::nullopt);
}

}  // namespace
}  // namespace keel::test
