// The CUDA runner's hidden rows (ForwardBatch::want_hidden, cuda_runner_hidden.cpp) against
// the CPU runner's on a tiny random Llama of 6 layers: the final hidden state before the
// final norm, and the outputs of chosen layers ({1, 3, 5}, and a list with repeats in
// another order), over a prefill step (the eager unfused layers), decode and verify steps
// (fused layers, CUDA graphs) and the same steps with graphs and the fused path off; the
// rows through forward_sample; a list that grows after graphs were captured; logits that
// do not change when hidden rows are asked for; a layer out of range refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <random>

#include "cuda_test_util.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "formats/make_model.h"

namespace keel::cuda {
namespace {

using test::rel_err;
using L = SequenceSlice::Logits;

constexpr int kLayers = 6, kBlock = 4;

const std::filesystem::path &model_dir() {
  static const auto dir = [] {
    const auto p = std::filesystem::temp_directory_path() /
                   ("keel-cuda-hidden-rows-" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    MakeModelOptions o;
    o.arch = "llama";
    o.hidden = 128;
    o.intermediate = 256;
    o.layers = kLayers;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 32;
    o.vocab = 512;
    o.dtype = DType::kBF16;  // both runners compute with the very same weights
    o.seed = 3;
    o.out = p;
    o.threads = 2;
    make_model(o);
    return p;
  }();
  return dir;
}

struct Seq {
  std::vector<TokenId> tokens;
  std::int32_t first_block = 0;  // blocks [first_block, first_block + 8)
};

struct Item {
  const Seq *seq;
  std::int32_t start, n;
  L logits;
  std::int32_t num_logits = 1;
};

ForwardBatch batch_of(const std::vector<Item> &items) {
  ForwardBatch b;
  for (const Item &it : items) {
    SequenceSlice s;
    s.token_offset = b.total_tokens();
    s.num_tokens = it.n;
    s.start_pos = it.start;
    s.block_offset = static_cast<std::int32_t>(b.block_table.size());
    s.num_blocks = 8;
    s.logits = it.logits;
    s.num_logits = it.num_logits;
    for (int i = 0; i < 8; ++i) b.block_table.push_back(it.seq->first_block + i);
    b.tokens.insert(b.tokens.end(), it.seq->tokens.begin() + it.start,
                    it.seq->tokens.begin() + it.start + it.n);
    b.seqs.push_back(s);
  }
  return b;
}

// The rows `layers` name, taken from the CPU's rows of every layer ([T, 6 H]).
std::vector<float> select(const std::vector<float> &all, std::int64_t T, std::int64_t H,
                          const std::vector<std::int32_t> &layers) {
  std::vector<float> out;
  for (std::int64_t t = 0; t < T; ++t)
    for (const std::int32_t l : layers)
      out.insert(out.end(), all.begin() + (t * kLayers + l) * H,
                 all.begin() + (t * kLayers + l + 1) * H);
  return out;
}

// Slot `slot` of every token's row of `n` slots.
std::vector<float> slots(const std::vector<float> &rows, std::int64_t T, std::int64_t H,
                         std::int64_t n, std::int64_t slot) {
  std::vector<float> out;
  for (std::int64_t t = 0; t < T; ++t)
    out.insert(out.end(), rows.begin() + (t * n + slot) * H, rows.begin() + (t * n + slot + 1) * H);
  return out;
}

// Worst relative error of a token's row (every slot of it together).
double worst_row_err(const std::vector<float> &got, const std::vector<float> &want,
                     std::size_t width) {
  double worst = 0;
  for (std::size_t at = 0; at + width <= want.size(); at += width)
    worst =
        std::max(worst, rel_err(std::vector<float>(got.begin() + at, got.begin() + at + width),
                                std::vector<float>(want.begin() + at, want.begin() + at + width)));
  return worst;
}

struct Config {
  bool graphs;
  int fused_max_m;
};

void run_config(const Config &c) {
  SCOPED_TRACE(std::string("graphs ") + (c.graphs ? "on" : "off") + ", fused_decode_max_m " +
               std::to_string(c.fused_max_m));
  ExecContext cpu_ctx(2);
  auto cpu = cpu::CpuModelRunner::open(model_dir(), cpu_ctx, cpu::KvOptions{64, kBlock});
  CudaContext ctx;
  CudaRunnerOptions o;
  o.block_size = kBlock;
  o.num_kv_blocks = 64;
  o.max_batch_tokens = 64;
  o.max_seqs = 8;
  o.max_logits_rows = 32;
  o.max_model_len = 32;
  o.cuda_graphs = c.graphs;
  o.kernels.fused_decode_max_m = c.fused_max_m;
  o.gpu_sampling = true;
  auto gpu = CudaModelRunner::open(model_dir(), ctx, o);
  const std::int64_t H = gpu->config().hidden_size;

  std::mt19937 rng(11);
  std::uniform_int_distribution<TokenId> tok(0, 511);
  Seq a, b;
  a.first_block = 0;
  b.first_block = 8;
  for (int i = 0; i < 24; ++i) a.tokens.push_back(tok(rng));
  for (int i = 0; i < 24; ++i) b.tokens.push_back(tok(rng));

  // Each layer's output comes from the residual stream, rounded to bf16 on its way through
  // every projection on the device (the CPU runner keeps f32 activations): each rounding is
  // a relative 2^-9, a few of them a layer over six layers. 2e-2 of a row's norm is that
  // budget with room; a wrong layer, a missed residual add or a swapped slot is off by 30%
  // or more (each layer adds a comparable amount to the stream).
  constexpr double kTol = 2e-2;
  constexpr double kSame = 1e-6;
  const std::vector<std::int32_t> aux{1, 3, 5}, repeats{5, 1, 5};
  const std::vector<std::vector<Item>> steps{
      // Prefill: 13 tokens of a (every row's logits), 6 of b (none).
      {{&a, 0, 13, L::kAll}, {&b, 0, 6, L::kNone}},
      // b's next chunk and a's decode.
      {{&b, 6, 5, L::kLast}, {&a, 13, 1, L::kLast}},
      // Decode: one token each (a graph bucket, the fused layers).
      {{&a, 14, 1, L::kLast}, {&b, 11, 1, L::kLast}},
      // A verify: a's last token and three drafts, every row's logits; b decodes.
      {{&a, 15, 4, L::kTail, 4}, {&b, 12, 1, L::kLast}},
  };
  for (std::size_t si = 0; si < steps.size(); ++si) {
    SCOPED_TRACE("step " + std::to_string(si));
    ForwardBatch batch = batch_of(steps[si]);
    const std::int64_t T = batch.total_tokens();
    // The CPU's rows of every layer; each list's rows are selected from them.
    ForwardBatch all = batch;
    all.want_hidden = true;
    all.hidden_layers = {0, 1, 2, 3, 4, 5};
    ForwardOutput ref;
    cpu->forward(all, ref);
    ASSERT_EQ(ref.hidden.size(), static_cast<std::size_t>(T * kLayers * H));

    ForwardOutput plain;
    gpu->forward(batch, plain);  // recomputing a step's positions writes the same KV
    EXPECT_TRUE(plain.hidden.empty());

    ForwardBatch fin = batch;
    fin.want_hidden = true;
    ForwardOutput final_rows;
    gpu->forward(fin, final_rows);
    ASSERT_EQ(final_rows.hidden.size(), static_cast<std::size_t>(T * H));
    EXPECT_LT(worst_row_err(final_rows.hidden, select(ref.hidden, T, H, {5}), H), kTol);
    // The copies change nothing else. (Across calls: the same kernels on the same inputs,
    // within a hair for any reduction order a library might vary.)
    EXPECT_LT(rel_err(final_rows.logits, plain.logits), kSame);

    for (const auto &layers : {aux, repeats}) {
      ForwardBatch lb = batch;
      lb.want_hidden = true;
      lb.hidden_layers = layers;
      ForwardOutput got;
      gpu->forward(lb, got);
      ASSERT_EQ(got.hidden.size(), static_cast<std::size_t>(T * 3 * H));
      EXPECT_LT(worst_row_err(got.hidden, select(ref.hidden, T, H, layers), 3 * H), kTol);
      EXPECT_LT(rel_err(got.logits, plain.logits), kSame);
      // The last layer's slot is the final hidden state; a repeated layer's slots are the
      // same copy, bit for bit.
      const std::size_t last = layers == aux ? 2 : 0;
      EXPECT_LT(rel_err(slots(got.hidden, T, H, 3, last), final_rows.hidden), kSame);
      if (layers == repeats)
        EXPECT_EQ(slots(got.hidden, T, H, 3, 0), slots(got.hidden, T, H, 3, 2));
    }

    // Through forward_sample (greedy rows sampled on the device): the same rows.
    ForwardBatch sb = batch;
    sb.want_hidden = true;
    sb.hidden_layers = aux;
    static const SamplingParams kGreedy = [] {
      SamplingParams p;
      p.temperature = 0.0f;
      return p;
    }();
    std::vector<DeviceSampleRow> rows(plain.row_seq.size(), DeviceSampleRow{&kGreedy});
    ForwardOutput sampled;
    gpu->forward_sample(sb, rows, sampled);
    ASSERT_EQ(sampled.sampled.size(), rows.size());
    ForwardOutput again;
    gpu->forward(sb, again);
    ASSERT_EQ(sampled.hidden.size(), again.hidden.size());
    EXPECT_LT(rel_err(sampled.hidden, again.hidden), kSame);
  }

  // A longer list after graphs were captured with shorter ones: the buffer grows, the
  // graphs that wrote into the old one are dropped, and every list still reads right.
  ForwardBatch dec = batch_of({{&a, 14, 1, L::kLast}, {&b, 11, 1, L::kLast}});
  dec.want_hidden = true;
  ForwardOutput before;
  gpu->forward(dec, before);
  const std::int64_t bytes = gpu->hidden_bytes();
  ForwardBatch four = dec;
  four.hidden_layers = {5, 1, 5, 3};
  ForwardOutput got4;
  gpu->forward(four, got4);
  EXPECT_GT(gpu->hidden_bytes(), bytes);
  ASSERT_EQ(got4.hidden.size(), static_cast<std::size_t>(2 * 4 * H));
  ForwardOutput after;
  gpu->forward(dec, after);
  ASSERT_EQ(after.hidden.size(), before.hidden.size());
  EXPECT_LT(rel_err(after.hidden, before.hidden), kSame);
  EXPECT_LT(rel_err(slots(got4.hidden, 2, H, 4, 0), before.hidden), kSame);
  EXPECT_EQ(slots(got4.hidden, 2, H, 4, 0), slots(got4.hidden, 2, H, 4, 2));

  // A layer the model does not have: refused before anything is enqueued.
  ForwardBatch bad = dec;
  bad.hidden_layers = {1, kLayers};
  ForwardOutput none;
  try {
    gpu->forward(bad, none);
    ADD_FAILURE() << "hidden layer " << kLayers << " accepted";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("hidden_layers names layer 6 of 6"), std::string::npos)
        << e.what();
  }
  ForwardOutput still;
  gpu->forward(dec, still);
  ASSERT_EQ(still.hidden.size(), before.hidden.size());
  EXPECT_LT(rel_err(still.hidden, before.hidden), kSame);
}

TEST(CudaHiddenRows, MatchTheCpuRunnersWithGraphsAndFusedLayers) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_config({true, 8});
}

TEST(CudaHiddenRows, MatchTheCpuRunnersEagerUnfused) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_config({false, 0});
}

TEST(CudaHiddenRows, MatchTheCpuRunnersWithGraphsUnfused) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_config({true, 0});
}

}  // namespace
}  // namespace keel::cuda
