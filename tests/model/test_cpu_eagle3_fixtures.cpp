// The CPU EAGLE-3 head (exec/arch/eagle3_head.h) against a float64 reference of the saved
// files (scripts/ref/eagle3_fixtures.py, pure Python; tests/fixtures/eagle3): a tiny random
// llama target and a random head for it (make_model, make_eagle3_head: norms not ones,
// d2t with non-zero offsets, the target's embedding borrowed): every position's draft
// logits, h' and target-id argmax within 1e-4, whether the positions come in one step or
// several (the head's cache carries them), and k = 3 chained drafts; so a swapped fc
// concatenation, a swapped [embed ; hidden] concatenation or an ignored d2t fails it.
// Plus the runner seam the head reads (ForwardBatch::hidden_layers): layer l's row is the
// output of target layer l (what a model of the first l + 1 layers returns as its final
// hidden state), in the order asked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "exec/arch/eagle3_head.h"
#include "exec/cpu/cpu_model_runner.h"
#include "formats/eagle3_config.h"
#include "formats/make_eagle3_head.h"
#include "formats/make_model.h"
#include "support/hidden_batch.h"
#include "support/paths.h"

namespace keel::test {
namespace {

std::filesystem::path temp_dir(const std::string &tag) {
  return std::filesystem::temp_directory_path() /
         ("keel-eagle3-" + tag + "-" + std::to_string(::getpid()));
}

nlohmann::json fixture() {
  std::ifstream f(fixtures_dir() / "eagle3" / "llama_tiny.json");
  if (!f) throw std::runtime_error("tests/fixtures/eagle3/llama_tiny.json: missing");
  return nlohmann::json::parse(f);
}

std::filesystem::path make_target(std::uint64_t seed, std::int64_t layers, const std::string &tag) {
  MakeModelOptions o;
  o.arch = "llama";
  o.shape = "tiny";
  o.layers = layers;
  o.dtype = DType::kF32;
  o.seed = seed;
  o.out = temp_dir(tag);
  o.threads = 2;
  std::filesystem::remove_all(o.out);
  make_model(o);
  return o.out;
}

void expect_close(const std::vector<float> &got, std::size_t offset, const nlohmann::json &want,
                  const std::string &what) {
  double worst = 0, scale = 1e-3;
  for (const auto &v : want) scale = std::max(scale, std::abs(v.get<double>()));
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[offset + i]) - want[i].get<double>()));
  EXPECT_LT(worst / scale, 1e-4) << what << ": worst difference " << worst << " of " << scale;
}

struct FixtureHead {
  nlohmann::json fx = fixture();
  ExecContext ctx{2};
  std::unique_ptr<cpu::CpuModelRunner> target;
  std::unique_ptr<arch::Eagle3Head> head;
  FixtureHead() {
    const auto &m = fx["make_model"];
    const auto target_dir = make_target(m["seed"].get<std::uint64_t>(), 2, "target");
    target = cpu::CpuModelRunner::open(target_dir, ctx, {4, 16});
    MakeEagle3Options o;
    o.target = target->config();
    o.seed = m["eagle3_seed"].get<std::uint64_t>();
    o.out = temp_dir("head");
    std::filesystem::remove_all(o.out);
    make_eagle3_head(o);
    head = std::make_unique<arch::Eagle3Head>(o.out, target->config(), target->model().embed());
    std::filesystem::remove_all(o.out);  // the mapping keeps the bytes
    std::filesystem::remove_all(target_dir);
  }
  std::vector<float> aux(std::size_t from, std::size_t n) const {
    std::vector<float> out;
    for (std::size_t t = from; t < from + n; ++t)
      for (const auto &v : fx["aux"][t]) out.push_back(v.get<float>());
    return out;
  }
};

TEST(CpuEagle3Fixture, RowsAndChainMatchTheReference) {
  FixtureHead f;
  const auto &fx = f.fx;
  const std::vector<TokenId> tokens = fx["tokens"].get<std::vector<TokenId>>();
  const std::size_t n = tokens.size(), Vd = f.head->config().draft_vocab_size,
                    H = static_cast<std::size_t>(f.head->hidden_size());
  ASSERT_EQ(fx["rows"][0]["logits"].size(), Vd);
  // All positions in one step, then in steps of 1, 2 and 3 positions.
  for (const std::vector<std::size_t> &split :
       {std::vector<std::size_t>{n}, std::vector<std::size_t>{1, 2, 3}}) {
    MtpCache cache;
    std::size_t at = 0;
    MtpOutput out;
    for (const std::size_t len : split) {
      const std::vector<float> rows = f.aux(at, len);
      MtpInput in;
      in.start_pos = static_cast<std::int32_t>(at);
      in.hidden = rows;
      in.tokens = std::span<const TokenId>(tokens).subspan(at, len);
      in.head = MtpInput::Head::kAll;
      in.want_logits = true;
      f.head->forward(cache, in, out, f.ctx);
      ASSERT_EQ(out.argmax.size(), len);
      for (std::size_t j = 0; j < len; ++j) {
        const auto &want = fx["rows"][at + j];
        const std::string what =
            "position " + std::to_string(at + j) + " of a split of " + std::to_string(split.size());
        expect_close(out.logits, j * Vd, want["logits"], what + " logits");
        expect_close(out.hidden, j * H, want["hidden_out"], what + " h'");
        EXPECT_EQ(out.argmax[j], want["argmax"].get<TokenId>()) << what;
      }
      at += len;
    }
    // k = 3 chained drafts from the last position's h' and guess.
    std::vector<float> h(out.hidden.end() - static_cast<std::ptrdiff_t>(H), out.hidden.end());
    TokenId guess = out.argmax.back();
    for (std::size_t i = 0; i < fx["chain"].size(); ++i) {
      MtpInput c;
      c.start_pos = cache.length;
      c.hidden = h;
      c.chained = true;
      c.tokens = std::span<const TokenId>(&guess, 1);
      c.want_logits = true;
      f.head->forward(cache, c, out, f.ctx);
      const auto &want = fx["chain"][i];
      expect_close(out.logits, 0, want["logits"], "chain step " + std::to_string(i));
      expect_close(out.hidden, 0, want["hidden_out"], "chain step h' " + std::to_string(i));
      EXPECT_EQ(out.argmax[0], want["argmax"].get<TokenId>()) << "chain step " << i;
      h = out.hidden;
      guess = out.argmax[0];
    }
  }
}

TEST(CpuEagle3Fixture, TheDraftVocabularyMapsThroughD2t) {
  FixtureHead f;
  // make_eagle3_head's d2t: one target id per stride of V / Vd, so offsets grow with d.
  EXPECT_EQ(f.head->config().draft_vocab_size, 256);
  int moved = 0;
  for (std::int64_t d = 0; d < 256; ++d) {
    EXPECT_GE(f.head->target_id(d), 2 * d);
    EXPECT_LT(f.head->target_id(d), 2 * d + 2);
    moved += f.head->target_id(d) != d;
  }
  EXPECT_GT(moved, 200);
}

// ForwardBatch::hidden_layers: the outputs of the layers asked for, concatenated in that
// order. A 3-layer model and its first layers alone (make_model names tensors alike, so
// the same seed gives the same layers): layer l's row is the (l + 1)-layer model's final
// hidden state; a batch that asks for none gets the final one as before.
TEST(CpuEagle3Fixture, RunnerReturnsTheAuxLayersOutputs) {
  ExecContext ctx(2);
  const auto three = make_target(21, 3, "three");
  const auto one = make_target(21, 1, "one");
  const auto two = make_target(21, 2, "two");
  auto r3 = cpu::CpuModelRunner::open(three, ctx, {8, 16});
  auto r1 = cpu::CpuModelRunner::open(one, ctx, {8, 16});
  auto r2 = cpu::CpuModelRunner::open(two, ctx, {8, 16});
  const std::vector<TokenId> tokens{3, 17, 99, 4, 250, 8, 77};
  auto run = [&](cpu::CpuModelRunner &r, std::vector<std::int32_t> layers) {
    ForwardOutput out;
    r.forward(keel::test::hidden_batch(tokens, std::move(layers)), out);
    return out.hidden;
  };
  const std::vector<float> aux = run(*r3, {2, 0, 1});
  const std::vector<float> h1 = run(*r1, {}), h2 = run(*r2, {}), h3 = run(*r3, {});
  const std::size_t H = 64, T = tokens.size();
  ASSERT_EQ(aux.size(), T * 3 * H);
  ASSERT_EQ(h1.size(), T * H);
  double worst = 0;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < H; ++i) {
      worst = std::max(worst, std::abs(double(aux[(t * 3 + 0) * H + i]) - h3[t * H + i]));
      worst = std::max(worst, std::abs(double(aux[(t * 3 + 1) * H + i]) - h1[t * H + i]));
      worst = std::max(worst, std::abs(double(aux[(t * 3 + 2) * H + i]) - h2[t * H + i]));
    }
  EXPECT_LT(worst, 1e-4);
  // The layers differ (a row taken from the wrong layer could not pass the check above).
  EXPECT_GT(std::abs(double(h1[5]) - h2[5]) + std::abs(double(h2[9]) - h3[9]), 1e-3);
  // A layer the model does not have is refused by name.
  try {
    run(*r3, {0, 3});
    ADD_FAILURE() << "layer 3 of 3 accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("hidden_layers names layer 3 of 3"), std::string::npos)
        << e.what();
  }
  for (const auto &d : {three, one, two}) std::filesystem::remove_all(d);
}

// config.json as the releases write it: SGLang / SpecForge's eagle_config ids are layer
// outputs; vLLM's speculators format nests the layer in transformer_layer_config and
// indexes its top-level ids by the layer whose input it captures (one more); without ids,
// the inputs of layers 2, L/2 and L-3. Wrong fields are named.
TEST(CpuEagle3Config, LayerIdConventionsAndLayouts) {
  const std::string layer =
      R"("hidden_size": 64, "intermediate_size": 192, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 512, "draft_vocab_size": 128, "rms_norm_eps": 1e-5)";
  const Eagle3Config sglang = parse_eagle3_config(
      R"({"architectures": ["LlamaForCausalLMEagle3"], )" + layer +
          R"(, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})",
      "sglang");
  EXPECT_EQ(sglang.aux_layer_ids, (std::vector<std::int32_t>{1, 15, 28}));
  EXPECT_EQ(sglang.layer.hidden_size, 64);
  EXPECT_EQ(sglang.layer.head_dim, 16);
  EXPECT_EQ(sglang.draft_vocab_size, 128);
  EXPECT_EQ(sglang.target_hidden_size, 64);
  const Eagle3Config vllm = parse_eagle3_config(
      R"({"architectures": ["Eagle3Speculator"], "transformer_layer_config": {"model_type": "llama", )" +
          layer + R"(}, "draft_vocab_size": 128, "target_hidden_size": 96,
          "norm_before_residual": true, "eagle_aux_hidden_state_layer_ids": [2, 16, 29]})",
      "vllm");
  EXPECT_EQ(vllm.aux_layer_ids, (std::vector<std::int32_t>{1, 15, 28}));
  EXPECT_EQ(vllm.layer.intermediate_size, 192);
  EXPECT_EQ(vllm.target_hidden_size, 96);
  EXPECT_TRUE(vllm.norm_before_residual);
  // No ids: the default for a 32-layer target, the outputs of 1, 15 and 28.
  const Eagle3Config none = parse_eagle3_config("{" + layer + "}", "none");
  EXPECT_TRUE(none.aux_layer_ids.empty());
  EXPECT_EQ(eagle3_aux_layers(none, 32), (std::vector<std::int32_t>{1, 15, 28}));
  auto refused = [](const std::string &text, const std::string &needle) {
    try {
      parse_eagle3_config(text, "cfg");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("{" + layer + R"(, "eagle_aux_hidden_state_layer_ids": [0, 16, 29]})",
          "eagle_aux_hidden_state_layer_ids: 0");
  // yuhuili's EAGLE3-LLaMA3.1-Instruct-8B names LlamaForCausalLM, with a draft_vocab_size;
  // a model's config has none.
  EXPECT_EQ(parse_eagle3_config(R"({"architectures": ["LlamaForCausalLM"], )" + layer + "}", "y")
                .draft_vocab_size,
            128);
  refused(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 192,
      "num_attention_heads": 4, "vocab_size": 512})",
          "is not an EAGLE-3 head");
  refused(R"({"hidden_size": 64, "intermediate_size": 192, "num_attention_heads": 4,
      "vocab_size": 512, "draft_vocab_size": 1024})",
          "draft_vocab_size 1024");
  try {
    eagle3_aux_layers(none, 4);  // 4 layers: the default's L - 4 is layer 0, L/2 - 1 is 1: fine
    eagle3_aux_layers(none, 3);
    ADD_FAILURE() << "a 3-layer target has no default aux layers";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("is outside the target's 3 layers"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace keel::test
