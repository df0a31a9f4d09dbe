// The CPU runner on multi-head latent attention models (deepseek_v3, glm_moe_dsa) against
// HF transformers' float64 reference of the saved files (tests/fixtures/mla_models, made
// by scripts/ref/mla_fixtures.py on the GPU machine: scripts/device/mla_h200.sh). Prompts
// run past the DSA indexer's index_topk (8), so the sparse selection matters. Every prompt
// logprob within 1e-3 and the same greedy token wherever the reference's top two logits
// are more than 1e-3 apart: alone, batched with 31 other sequences, with the prompt's
// prefix blocks already cached (computed by another sequence, only the rest prefilled in
// chunks), and after its latent blocks went through save_block / load_block into another
// runner (what the host and SSD tiers do with them).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/safetensors_writer.h"
#include "model_harness.h"
#include "support/paths.h"
#include "unit/formats/temp_dir.h"

namespace keel::test {
namespace {

constexpr double kTol = 1e-3;
constexpr int kOthers = 31;

const std::vector<std::string> kFixtures = {
    "deepseek_v3_f32", "deepseek_v3_bf16", "deepseek_v3_noqlora_f32",
    "glm_moe_dsa_f32", "glm_moe_dsa_bf16",
};

std::vector<TokenId> other_prompt(std::uint32_t seed, int n, int vocab) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    p.push_back(static_cast<TokenId>(3 + (seed >> 8) % (vocab - 3)));
  }
  return p;
}

TokenId argmax(const std::vector<float> &row) {
  return static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<std::vector<float>> rows_of(const ForwardOutput &o) {
  std::vector<std::vector<float>> rows;
  for (std::size_t r = 0; r < o.row_seq.size(); ++r) rows.push_back(log_softmax_row(o, r));
  return rows;
}

class MlaVsTransformers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixtures_dir() / "mla_models" / GetParam();
    if (!std::filesystem::exists(dir_ / "reference.json"))
      GTEST_SKIP() << "fixture absent: " << dir_
                   << " (made by scripts/ref/mla_fixtures.py; scripts/device/mla_h200.sh)";
    std::ifstream(dir_ / "reference.json") >> ref_;
  }
  std::filesystem::path dir_;
  nlohmann::json ref_;
};

// Prompt logprobs from the rows of positions [from, n) (`first` holds the rows of a step
// that asked for all of them, starting at position from - 1 ... or from), then greedy
// steps teacher-forced with the reference's tokens. `step(n, logits)` runs the fixture
// sequence's next n tokens and returns its rows.
template <typename Step>
double compare(const nlohmann::json &p, PagedSeq &seq, std::int32_t from, Step step) {
  double worst = 0;
  const auto n = static_cast<std::int32_t>(seq.tokens.size());
  const auto rows = step(n - from, SequenceSlice::Logits::kAll);
  EXPECT_EQ(rows.size(), static_cast<std::size_t>(n - from));
  const auto &plp = p["prompt_logprobs"];
  for (std::int32_t i = from + 1; i < n; ++i) {
    const double err = std::abs(rows[i - 1 - from][seq.tokens[i]] - plp[i].get<double>());
    worst = std::max(worst, err);
    EXPECT_LT(err, kTol) << "prompt token " << i;
  }
  std::vector<float> last = rows.back();
  for (const auto &g : p["greedy"]) {
    const TokenId want = g["id"].get<TokenId>();
    if (g["margin"].get<double>() > 1e-3) {
      EXPECT_EQ(argmax(last), want) << "greedy step at pos " << seq.tokens.size();
    }
    for (const auto &t : g["top"]) {
      const double err = std::abs(last[t[0].get<int>()] - t[1].get<double>());
      worst = std::max(worst, err);
      EXPECT_LT(err, kTol) << "top logprob of " << t[0] << " at pos " << seq.tokens.size();
    }
    seq.tokens.push_back(want);
    last = step(1, SequenceSlice::Logits::kLast).back();
  }
  return worst;
}

TEST_P(MlaVsTransformers, ConfigAndRopeMatchTheReference) {
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir_, ctx, {64, 16});
  const ModelConfig &c = runner->config();
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.kv_layout, KvLayout::kLatent);
  EXPECT_NEAR(c.mla->softmax_scale, ref_["scaling"].get<double>(), 1e-9);
  // The cache holds the latent row, not per-head K and V.
  EXPECT_EQ(runner->kv().block_bytes(),
            static_cast<std::size_t>(c.num_layers * 16 * c.mla->latent_values() * 4));
  const auto shared = ref_["index_shared"].get<std::vector<bool>>();
  for (std::size_t l = 0; l < shared.size(); ++l)
    EXPECT_EQ(c.mla->shared_selection(static_cast<std::int64_t>(l)), shared[l]) << l;
  ModelConfig rope_cfg = c;
  rope_cfg.head_dim = c.mla->qk_rope_head_dim;
  const auto table = cpu::make_rope_table(rope_cfg);
  const auto &inv = ref_["rotary"]["inv_freq"];
  ASSERT_EQ(inv.size(), table.inv_freq.size());
  for (std::size_t i = 0; i < inv.size(); ++i)
    EXPECT_NEAR(table.inv_freq[i], inv[i].get<double>(), 1e-6 * std::abs(inv[i].get<double>()))
        << i;
  EXPECT_NEAR(table.attention_scaling, ref_["rotary"]["attention_scaling"].get<double>(), 1e-6);
}

TEST_P(MlaVsTransformers, AloneMatchesReference) {
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir_, ctx, {64, 16});
  double worst = 0;
  std::uint32_t seed = 7;
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(64, seed++);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    worst = std::max(worst, compare(p, seq, 0, [&](std::int32_t n, SequenceSlice::Logits l) {
                       return rows_of(run_step(*runner, blocks, {{&seq, n, l}}));
                     }));
  }
  std::printf("%s alone: max |logprob error| = %.3g\n", GetParam().c_str(), worst);
}

// Greedy rows sampled inside the lm_head (CpuModelRunner::forward_sample) give the
// reference's greedy tokens where its margin allows.
TEST_P(MlaVsTransformers, GreedyHeadGivesTheReferenceTokens) {
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir_, ctx, {64, 16});
  int checked = 0;
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(64, 3);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    std::int32_t n = static_cast<std::int32_t>(seq.tokens.size());
    for (const auto &g : p["greedy"]) {
      const auto o = run_step(*runner, blocks, {{&seq, n, SequenceSlice::Logits::kLast}}, true);
      ASSERT_EQ(o.sampled.size(), 1u);
      if (g["margin"].get<double>() > 1e-3) {
        EXPECT_EQ(o.sampled[0], g["id"].get<TokenId>()) << "at pos " << seq.tokens.size();
        ++checked;
      }
      seq.tokens.push_back(g["id"].get<TokenId>());
      n = 1;
    }
  }
  EXPECT_GT(checked, 20);
}

// Each reference prompt in the middle of a batch of 32: the others prefill prompts of
// other lengths in the same step, then decode a token each step beside it.
TEST_P(MlaVsTransformers, BatchedWith31OthersMatchesReference) {
  ExecContext ctx(2);
  constexpr std::int32_t kBlocks = 512;
  auto runner = cpu::CpuModelRunner::open(dir_, ctx, {kBlocks, 16});
  const int V = static_cast<int>(runner->config().vocab_size);
  double worst = 0;
  std::uint32_t seed = 11;
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(kBlocks, seed++);
    std::vector<PagedSeq> others(kOthers);
    for (int s = 0; s < kOthers; ++s)
      others[s].tokens =
          other_prompt(seed * 131u + static_cast<std::uint32_t>(s), 1 + (7 * s) % 40, V);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    worst =
        std::max(worst, compare(p, seq, 0, [&](std::int32_t n, SequenceSlice::Logits l) {
                   std::vector<StepItem> items;
                   for (int s = 0; s < kOthers / 2; ++s) {
                     PagedSeq &q = others[s];
                     items.push_back({&q, static_cast<std::int32_t>(q.tokens.size()) - q.computed,
                                      SequenceSlice::Logits::kLast});
                   }
                   const std::size_t mine = items.size();
                   items.push_back({&seq, n, l});
                   for (int s = kOthers / 2; s < kOthers; ++s) {
                     PagedSeq &q = others[s];
                     items.push_back({&q, static_cast<std::int32_t>(q.tokens.size()) - q.computed,
                                      SequenceSlice::Logits::kLast});
                   }
                   auto o = run_step(*runner, blocks, items);
                   std::vector<std::vector<float>> rows;
                   for (std::size_t r = 0; r < o.row_seq.size(); ++r) {
                     const auto row = log_softmax_row(o, r);
                     const auto at = static_cast<std::size_t>(o.row_seq[r]);
                     if (at == mine)
                       rows.push_back(row);
                     else
                       items[at].seq->tokens.push_back(argmax(row));
                   }
                   return rows;
                 }));
  }
  std::printf("%s batched with %d others: max |logprob error| = %.3g\n", GetParam().c_str(),
              kOthers, worst);
}

// The prompt's full blocks computed by another sequence first (a warm prefix cache: the
// blocks are shared, as the KV cache manager shares them), then the rest of the prompt in
// chunks of 5 tokens asking for all rows; the same blocks again after they went through
// save_block / load_block into a second runner's cache (the tiers' path, byte for byte).
TEST_P(MlaVsTransformers, WarmPrefixAndRestoredBlocksMatchReference) {
  constexpr std::int32_t kBlocks = 64, kBs = 4;
  double worst = 0;
  for (const auto &p : ref_["prompts"]) {
    const auto ids = p["ids"].get<std::vector<TokenId>>();
    const std::int32_t cached = static_cast<std::int32_t>(ids.size()) / kBs * kBs;
    if (cached == 0 || cached == static_cast<std::int32_t>(ids.size())) continue;
    ExecContext ctx(2);
    auto first = cpu::CpuModelRunner::open(dir_, ctx, {kBlocks, kBs});
    BlockHandout blocks(kBlocks, 3);
    PagedSeq warm;
    warm.tokens.assign(ids.begin(), ids.begin() + cached);
    run_step(*first, blocks, {{&warm, cached, SequenceSlice::Logits::kLast}});
    for (int restored = 0; restored < 2; ++restored) {
      auto second = restored ? cpu::CpuModelRunner::open(dir_, ctx, {kBlocks, kBs}) : nullptr;
      cpu::CpuModelRunner &runner = restored ? *second : *first;
      PagedSeq seq;
      seq.tokens = ids;
      seq.blocks = warm.blocks;
      seq.computed = cached;
      if (restored) {  // the blocks' bytes into the new runner's cache, same ids
        std::vector<std::byte> img(first->kv().block_bytes());
        for (std::int32_t b : warm.blocks) {
          first->kv().save_block(b, img);
          second->kv().load_block(b, img);
        }
      }
      BlockHandout more(kBlocks, 5 + restored);  // unused: the step gives blocks itself
      std::vector<std::int32_t> used(warm.blocks);
      auto step = [&](std::int32_t n, SequenceSlice::Logits l) {
        std::vector<std::vector<float>> rows;
        for (std::int32_t done = 0; done < n;) {
          const std::int32_t k = std::min(5, n - done);
          // Fresh blocks from the top of the id range, never a warm one.
          while (static_cast<std::int32_t>(seq.blocks.size()) * kBs < seq.computed + k) {
            std::int32_t id = kBlocks - 1 - static_cast<std::int32_t>(used.size());
            while (std::find(used.begin(), used.end(), id) != used.end()) --id;
            used.push_back(id);
            seq.blocks.push_back(id);
          }
          auto o = run_step(runner, more, {{&seq, k, l}});
          for (auto &r : rows_of(o)) rows.push_back(std::move(r));
          done += k;
        }
        return rows;
      };
      worst = std::max(worst, compare(p, seq, cached, step));
    }
  }
  std::printf("%s warm prefix and restored: max |logprob error| = %.3g\n", GetParam().c_str(),
              worst);
}

// The sparse selection is what the reference computed: the same GLM-5 files with an
// index_topk past every prompt (dense attention) miss the reference's logprobs.
TEST_P(MlaVsTransformers, DenseAttentionMissesTheSparseReference) {
  if (ref_["arch"] != "glm_moe_dsa") GTEST_SKIP() << "no DSA indexer";
  test::TempDir dir;
  std::filesystem::copy_file(dir_ / "model.safetensors", dir / "model.safetensors");
  nlohmann::json cfg;
  std::ifstream(dir_ / "config.json") >> cfg;
  cfg["index_topk"] = 4096;
  std::ofstream(dir / "config.json") << cfg.dump();
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir.path(), ctx, {64, 16});
  const auto &p = ref_["prompts"].back();  // the longest prompt: 40 tokens, top-k 8
  BlockHandout blocks(64, 9);
  PagedSeq seq;
  seq.tokens = p["ids"].get<std::vector<TokenId>>();
  const auto rows = rows_of(run_step(
      *runner, blocks,
      {{&seq, static_cast<std::int32_t>(seq.tokens.size()), SequenceSlice::Logits::kAll}}));
  double worst = 0;
  for (std::size_t i = 1; i < seq.tokens.size(); ++i)
    worst = std::max(worst,
                     std::abs(rows[i - 1][seq.tokens[i]] - p["prompt_logprobs"][i].get<double>()));
  EXPECT_GT(worst, 10 * kTol);
  std::printf("%s with dense attention: max |logprob error| = %.3g\n", GetParam().c_str(), worst);
}

// A random DeepSeek-V3 written as llama.cpp's deepseek2 GGUF (f32), and the same tensors
// (as the GGUF loader names them) rewritten as an HF safetensors directory with make-model's
// config.json of that shape: the CPU runner gives the same logits for both, so the GGUF
// keys and tensor names mean what the HF config and names do.
TEST(MlaGguf, Deepseek2GgufMatchesItsSafetensorsForm) {
  test::TempDir st, gg;
  MakeModelOptions o;
  o.arch = "deepseek_v3";
  o.shape = "tiny";
  o.dtype = DType::kF32;
  o.seed = 3;
  o.threads = 1;
  o.out = st.path();
  make_model(o);  // for its config.json and tokenizer
  o.gguf = true;
  o.out = gg / "model.gguf";
  make_model(o);
  {
    auto w = ModelWeights::open(gg / "model.gguf");
    std::vector<TensorSpec> specs;
    std::vector<const TensorView *> views;
    for (const std::string &name : w->names()) {
      const TensorView *t = w->find(name);
      ASSERT_EQ(t->dtype, DType::kF32) << name;
      specs.push_back({name, DType::kF32, t->shape});
      views.push_back(t);
    }
    std::filesystem::remove(st / "model.safetensors");
    SafetensorsWriter out(st / "model.safetensors", specs);
    for (std::size_t i = 0; i < views.size(); ++i)
      out.write(i, 0, std::span(views[i]->data, views[i]->nbytes));
    out.commit();
  }
  ExecContext ctx(2);
  auto a = cpu::CpuModelRunner::open(st.path(), ctx, {16, 16});
  auto b = cpu::CpuModelRunner::open(gg / "model.gguf", ctx, {16, 16});
  const auto prompt = other_prompt(5, 37, static_cast<int>(a->config().vocab_size));
  std::vector<std::vector<float>> rows[2];
  for (int i = 0; i < 2; ++i) {
    BlockHandout blocks(16, 1);
    PagedSeq seq;
    seq.tokens = prompt;
    rows[i] = rows_of(
        run_step(i ? *b : *a, blocks,
                 {{&seq, static_cast<std::int32_t>(prompt.size()), SequenceSlice::Logits::kAll}}));
  }
  ASSERT_EQ(rows[0].size(), rows[1].size());
  double worst = 0, spread = 0;
  for (std::size_t r = 0; r < rows[0].size(); ++r)
    for (std::size_t v = 0; v < rows[0][r].size(); ++v) {
      worst = std::max(worst, static_cast<double>(std::abs(rows[0][r][v] - rows[1][r][v])));
      spread = std::max(spread, static_cast<double>(std::abs(rows[0][r][v] - rows[0][0][v])));
    }
  EXPECT_EQ(worst, 0.0);
  EXPECT_GT(spread, 1e-3);  // the rows are not all alike
}

// llama.cpp's MLA files split kv_b_proj into attn_k_b (transposed) and attn_v_b; the
// loader joins them back: the same model written both ways gives the same logits.
TEST(MlaGguf, SplitKvBMatchesTheJoinedOne) {
  test::TempDir dir;
  MakeModelOptions o;
  o.arch = "deepseek_v3";
  o.shape = "tiny";
  o.dtype = DType::kF32;
  o.seed = 4;
  o.threads = 1;
  o.gguf = true;
  o.out = dir / "joined.gguf";
  make_model(o);
  o.gguf_split_kv_b = true;
  o.out = dir / "split.gguf";
  make_model(o);
  EXPECT_TRUE(ModelWeights::open(dir / "split.gguf")->find("blk.1.attn_k_b.weight"));
  EXPECT_FALSE(ModelWeights::open(dir / "joined.gguf")->find("blk.1.attn_k_b.weight"));
  ExecContext ctx(2);
  auto a = cpu::CpuModelRunner::open(dir / "joined.gguf", ctx, {16, 16});
  auto b = cpu::CpuModelRunner::open(dir / "split.gguf", ctx, {16, 16});
  const auto prompt = other_prompt(8, 29, static_cast<int>(a->config().vocab_size));
  std::vector<std::vector<float>> rows[2];
  for (int i = 0; i < 2; ++i) {
    BlockHandout blocks(16, 1);
    PagedSeq seq;
    seq.tokens = prompt;
    rows[i] = rows_of(
        run_step(i ? *b : *a, blocks,
                 {{&seq, static_cast<std::int32_t>(prompt.size()), SequenceSlice::Logits::kAll}}));
  }
  ASSERT_EQ(rows[0].size(), rows[1].size());
  for (std::size_t r = 0; r < rows[0].size(); ++r) ASSERT_EQ(rows[0][r], rows[1][r]) << r;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MlaVsTransformers, ::testing::ValuesIn(kFixtures),
                         [](const auto &info) { return info.param; });

}  // namespace
}  // namespace keel::test
