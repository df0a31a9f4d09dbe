// The CPU runner's MTP layer (exec/arch/mtp_head.h) against a float64 reference of the
// saved files (scripts/ref/mtp_fixtures.py, pure Python; tests/fixtures/mtp), GLM-4.5's
// (GQA) and DeepSeek-V3's (MLA: q through its latent or a plain q_proj, interleaved or
// half rope, YaRN from the fixture's config overrides), the target's final norm rewritten
// to the fixture's weights (not ones) so that the head's input, hnorm(norm(h)), shows:
// every position's logits and argmax within 1e-4 relative, the same whether the
// positions come in one step or several (the layer's cache carries them), and k = 3
// chained drafts; GLM-5's (glm_moe_dsa: MLA whose own DSA indexer selects index_topk 3 of
// the MTP positions, which moves the logits 0.2-2.5% from dense attention, 20-250x the
// bound). Plus the refusals: a model with no MTP layer, malformed head tensors named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "exec/cpu/cpu_model_runner.h"
#include "formats/make_model.h"
#include "support/mtp_fixture_model.h"
#include "support/rewrite_safetensors.h"

namespace keel::test {
namespace {

std::filesystem::path temp_dir(const std::string &tag) {
  return std::filesystem::temp_directory_path() /
         ("keel-mtp-" + tag + "-" + std::to_string(::getpid()));
}

std::unique_ptr<cpu::CpuModelRunner> open_fixture_model(const nlohmann::json &fx,
                                                        ExecContext &ctx) {
  const auto dir = temp_dir("fx");
  make_mtp_fixture_model(fx, dir);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {64, 16});
  std::filesystem::remove_all(dir);  // the mapping keeps the bytes
  return runner;
}

void expect_logits(const std::vector<float> &got, std::size_t row, std::size_t V,
                   const nlohmann::json &want, const std::string &what) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < V; ++i) scale = std::max(scale, std::abs(want[i].get<double>()));
  for (std::size_t i = 0; i < V; ++i)
    worst = std::max(worst, std::abs(got[row * V + i] - want[i].get<double>()));
  EXPECT_LE(worst / scale, 1e-4) << what;
}

class CpuMtpFixture : public ::testing::TestWithParam<const char *> {};

TEST_P(CpuMtpFixture, MatchesTheFloat64Reference) {
  const nlohmann::json fx = mtp_fixture(GetParam());
  ExecContext ctx(2);
  auto runner = open_fixture_model(fx, ctx);
  runner->load_mtp();
  const std::size_t hidden = static_cast<std::size_t>(runner->config().hidden_size);
  const std::size_t V = static_cast<std::size_t>(runner->config().vocab_size);
  const std::vector<TokenId> tokens = fx["tokens"].get<std::vector<TokenId>>();
  std::vector<float> rows;
  for (const auto &r : fx["hidden"])
    for (const auto &v : r) rows.push_back(v.get<float>());
  const std::size_t n = tokens.size();
  ASSERT_EQ(rows.size(), n * hidden);

  // All positions in one step.
  MtpCache cache;
  MtpOutput out;
  MtpInput in;
  in.hidden = rows;
  in.tokens = tokens;
  in.head = MtpInput::Head::kAll;
  in.want_logits = true;
  runner->mtp_forward(cache, in, out);
  ASSERT_EQ(out.argmax.size(), n);
  for (std::size_t t = 0; t < n; ++t) {
    EXPECT_EQ(out.argmax[t], fx["rows"][t]["argmax"].get<TokenId>()) << "position " << t;
    expect_logits(out.logits, t, V, fx["rows"][t]["logits"], "position " + std::to_string(t));
  }
  const std::vector<float> last_hidden(out.hidden.end() - static_cast<std::ptrdiff_t>(hidden),
                                       out.hidden.end());

  // The same positions over three steps (2 + 1 + rest), after a rolled-back detour.
  MtpCache split;
  MtpOutput o2;
  auto step = [&](std::size_t begin, std::size_t count) {
    MtpInput part;
    part.start_pos = static_cast<std::int32_t>(begin);
    part.hidden = std::span<const float>(rows).subspan(begin * hidden, count * hidden);
    part.tokens = std::span<const TokenId>(tokens).subspan(begin, count);
    part.head = MtpInput::Head::kAll;
    part.want_logits = true;
    runner->mtp_forward(split, part, o2);
  };
  step(0, 2);
  step(2, 2);  // a detour: positions 2-3 dropped and computed again below
  split.length = 2;
  step(2, 1);
  step(3, n - 3);
  EXPECT_EQ(o2.argmax.back(), fx["rows"][n - 1]["argmax"].get<TokenId>());
  expect_logits(o2.logits, n - 4, V, fx["rows"][n - 1]["logits"], "split steps");

  // k = 3 chained drafts from the last position.
  std::vector<float> h = last_hidden;
  TokenId guess = out.argmax.back();
  for (std::size_t i = 0; i < fx["chain"].size(); ++i) {
    MtpInput c;  // the head's last row only, as the drafter asks
    c.start_pos = cache.length;
    c.hidden = h;
    c.chained = true;  // h' without the target's norm
    c.tokens = std::span<const TokenId>(&guess, 1);
    c.want_logits = true;
    runner->mtp_forward(cache, c, out);
    EXPECT_EQ(out.argmax[0], fx["chain"][i]["argmax"].get<TokenId>()) << "chain " << i;
    expect_logits(out.logits, 0, V, fx["chain"][i]["logits"], "chain " + std::to_string(i));
    h = out.hidden;
    guess = out.argmax[0];
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CpuMtpFixture,
                         ::testing::Values("glm4_moe_tiny.json", "deepseek_v3_tiny.json",
                                           "deepseek_v3_noqlora_tiny.json",
                                           "glm_moe_dsa_tiny.json"),
                         [](const auto &info) {
                           const std::string n = info.param;
                           return n.substr(0, n.find("_tiny"));
                         });

TEST(CpuMtp, RefusesAModelWithoutAnMtpLayer) {
  MakeModelOptions o;
  o.arch = "glm4_moe";
  o.shape = "tiny";
  o.layers = 2;
  o.out = temp_dir("none");
  o.threads = 2;
  std::filesystem::remove_all(o.out);
  make_model(o);
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(o.out, ctx, {16, 16});
  std::filesystem::remove_all(o.out);
  try {
    runner->load_mtp();
    FAIL() << "no MTP layer, no error";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("no MTP layer"), std::string::npos) << e.what();
  }
}

// Rewrites the model's safetensors with `name` dropped or reshaped, then expects
// load_mtp to name it.
void expect_refusal_naming(const std::string &arch, const std::string &tensor, bool drop) {
  MakeModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.layers = 2;
  o.mtp_layers = 1;
  o.dtype = DType::kF32;
  o.out = temp_dir("bad");
  o.threads = 2;
  std::filesystem::remove_all(o.out);
  make_model(o);
  rewrite_safetensors(o.out / "model.safetensors", [&](const std::string &name, StoredTensor &t) {
    if (name != tensor) return true;
    if (drop) return false;
    t.shape = {t.shape[0] / 2, t.shape[1] * 2};  // same bytes, wrong shape
    return true;
  });
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(o.out, ctx, {16, 16});
  std::filesystem::remove_all(o.out);
  try {
    runner->load_mtp();
    FAIL() << tensor << ": no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(tensor), std::string::npos) << e.what();
  }
}

TEST(CpuMtp, NamesAMissingOrMisShapedHeadTensor) {
  expect_refusal_naming("glm4_moe", "model.layers.2.eh_proj.weight", true);
  expect_refusal_naming("glm4_moe", "model.layers.2.enorm.weight", true);
  expect_refusal_naming("glm4_moe", "model.layers.2.eh_proj.weight", false);
  // DeepSeek-V3's: the head's and its MLA block's tensors.
  expect_refusal_naming("deepseek_v3", "model.layers.2.hnorm.weight", true);
  expect_refusal_naming("deepseek_v3", "model.layers.2.shared_head.norm.weight", true);
  expect_refusal_naming("deepseek_v3", "model.layers.2.self_attn.kv_b_proj.weight", true);
  expect_refusal_naming("deepseek_v3", "model.layers.2.self_attn.q_b_proj.weight", false);
  expect_refusal_naming("deepseek_v3", "model.layers.2.mlp.gate.e_score_correction_bias", true);
  // GLM-5's: the MTP layer's own DSA indexer.
  expect_refusal_naming("glm_moe_dsa", "model.layers.2.self_attn.indexer.wk.weight", true);
  expect_refusal_naming("glm_moe_dsa", "model.layers.2.self_attn.indexer.wq_b.weight", false);
}

}  // namespace
}  // namespace keel::test
