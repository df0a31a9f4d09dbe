// Qwen3-MoE, GLM-4.5 and gpt-oss models (random weights from make_model) on the CPU runner: a
// sequence's logits are bit-identical alone and batched with 31 other sequences, in
// prefill and in decode, through paged KV blocks; GGUF and fused expert layouts; GLM's
// unused MTP layer. (Agreement with transformers comes from the fixtures
// scripts/ref/moe_fixtures.py makes, which test_cpu_moe_fixtures reads.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf_writer.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/safetensors_writer.h"
#include "model_harness.h"

namespace keel::test {
namespace {

std::vector<TokenId> prompt(std::uint32_t seed, int n, int vocab) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    p.push_back(static_cast<TokenId>(3 + (seed >> 8) % (vocab - 3)));
  }
  return p;
}

void alone_vs_batched_with_31_others(const std::string &arch) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("keel-moe-model-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.seed = 5;
  o.out = dir;
  o.threads = 2;
  make_model(o);
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {256, 16});
  std::filesystem::remove_all(dir);  // the mapping keeps the bytes
  ASSERT_TRUE(runner->config().moe);
  const int V = static_cast<int>(runner->config().vocab_size);
  constexpr int kLen = 29;

  // Alone: all prompt positions, then one decode step.
  std::vector<float> alone_prefill, alone_decode;
  {
    BlockHandout blocks(256, 1);
    PagedSeq seq;
    seq.tokens = prompt(1, kLen, V);
    auto out = run_step(*runner, blocks, {{&seq, kLen, SequenceSlice::Logits::kAll}});
    alone_prefill = out.logits;
    seq.tokens.push_back(17);
    out = run_step(*runner, blocks, {{&seq, 1, SequenceSlice::Logits::kLast}});
    alone_decode = out.logits;
  }

  // Together with 31 others of other lengths, in another order and other blocks.
  BlockHandout blocks(256, 77);
  std::vector<PagedSeq> seqs(32);
  std::vector<StepItem> items;
  for (int s = 31; s >= 0; --s) {
    const int n = s == 0 ? kLen : 1 + (s * 7) % 23;
    seqs[s].tokens = prompt(static_cast<std::uint32_t>(s + 1), n, V);
    items.push_back(
        {&seqs[s], n, s == 0 ? SequenceSlice::Logits::kAll : SequenceSlice::Logits::kLast});
  }
  auto out = run_step(*runner, blocks, items);
  std::size_t first = 0;
  while (first < out.row_seq.size() && items[out.row_seq[first]].seq != &seqs[0]) ++first;
  ASSERT_EQ(0, std::memcmp(alone_prefill.data(), out.logits.data() + first * V,
                           alone_prefill.size() * sizeof(float)));
  items.clear();
  for (int s = 0; s < 32; ++s) {
    seqs[s].tokens.push_back(s == 0 ? 17 : static_cast<TokenId>(3 + s));
    items.push_back({&seqs[s], 1, SequenceSlice::Logits::kLast});
  }
  out = run_step(*runner, blocks, items);
  ASSERT_EQ(out.row_seq.size(), 32u);
  EXPECT_EQ(0, std::memcmp(alone_decode.data(), out.logits.data(), V * sizeof(float)));
  // The logits are not degenerate.
  const auto [lo, hi] = std::minmax_element(alone_decode.begin(), alone_decode.end());
  EXPECT_GT(*hi - *lo, 0.01f);
}

TEST(CpuMoe, SameLogitsAloneAndBatchedWith31Others) {
  alone_vs_batched_with_31_others("qwen3_moe");
}
// GLM-4.5: grouped sigmoid routing, a shared expert, a dense first layer, partial rotary.
TEST(CpuMoe, Glm4MoeSameLogitsAloneAndBatchedWith31Others) {
  alone_vs_batched_with_31_others("glm4_moe");
}
// gpt-oss: sinks, a window of 16 on layer 0 (the 29-token prompt passes it), biased
// routing, expert biases and the clamped SwiGLU.
TEST(CpuMoe, GptOssSameLogitsAloneAndBatchedWith31Others) {
  alone_vs_batched_with_31_others("gpt_oss");
}

// The same model written as llama.cpp lays it out in GGUF (qwen3moe or glm4moe keys,
// each layer's experts stacked in blk.N.ffn_{gate,up,down}_exps.weight; GLM's shared
// expert in ffn_*_shexp and its correction bias in exp_probs_b) gives the same logits.
// Writes tensor i of `w` as sources[i]'s tensors one after another (experts stacked), and
// commits: the GGUF and the fused safetensors files hold the same stacked bytes.
template <typename Writer>
void write_stacked(Writer &w, const std::vector<std::vector<const TensorView *>> &sources) {
  for (std::size_t i = 0; i < sources.size(); ++i) {
    std::uint64_t off = 0;
    for (const TensorView *t : sources[i]) {
      w.write(i, off, std::span<const std::byte>(t->data, t->nbytes));
      off += t->nbytes;
    }
  }
  w.commit();
}

void gguf_matches_safetensors(const std::string &arch) {
  const auto base =
      std::filesystem::temp_directory_path() / ("keel-moe-gguf-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  MakeModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.dtype = DType::kF32;
  o.seed = 8;
  o.out = base / "st";
  o.threads = 2;
  make_model(o);
  const auto st = ModelWeights::open(base / "st");
  const ModelConfig &c = st->config();
  const MoeConfig &m = *c.moe;

  const bool glm = arch == "glm4_moe", oss = arch == "gpt_oss";
  GgufMetadata meta;
  const std::string gguf_arch = glm ? "glm4moe" : oss ? "gpt-oss" : "qwen3moe";
  meta.add_string("general.architecture", gguf_arch);
  const std::string a = gguf_arch + ".";
  meta.add_u32(a + "embedding_length", static_cast<std::uint32_t>(c.hidden_size));
  meta.add_u32(a + "feed_forward_length", static_cast<std::uint32_t>(c.intermediate_size));
  meta.add_u32(a + "block_count", static_cast<std::uint32_t>(c.num_layers));
  meta.add_u32(a + "attention.head_count", static_cast<std::uint32_t>(c.num_heads));
  meta.add_u32(a + "attention.head_count_kv", static_cast<std::uint32_t>(c.num_kv_heads));
  meta.add_u32(a + "attention.key_length", static_cast<std::uint32_t>(c.head_dim));
  meta.add_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  meta.add_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  meta.add_u32(a + "expert_count", static_cast<std::uint32_t>(m.num_experts));
  meta.add_u32(a + "expert_used_count", static_cast<std::uint32_t>(m.top_k));
  meta.add_u32(a + "expert_feed_forward_length", static_cast<std::uint32_t>(m.expert_intermediate));
  if (glm) {
    meta.add_u32(a + "expert_shared_count", 1);
    meta.add_u32(a + "leading_dense_block_count", 1);
    meta.add_f32(a + "expert_weights_scale", static_cast<float>(m.routed_scaling_factor));
    meta.add_bool(a + "expert_weights_norm", m.norm_topk_prob);
    meta.add_u32(a + "expert_gating_func", 2);
    meta.add_u32(a + "rope.dimension_count", static_cast<std::uint32_t>(c.head_dim / 2));
    meta.add_u32(a + "nextn_predict_layers", 0);
    meta.add_u32(a + "expert_group_count", static_cast<std::uint32_t>(m.n_group));
    meta.add_u32(a + "expert_group_used_count", static_cast<std::uint32_t>(m.topk_group));
  }
  if (oss) {  // llama.cpp's gpt-oss keys: the window (on even layers) and YaRN
    meta.add_u32(a + "attention.sliding_window", static_cast<std::uint32_t>(*c.sliding_window));
    meta.add_string(a + "rope.scaling.type", "yarn");
    meta.add_f32(a + "rope.scaling.factor", static_cast<float>(c.rope_scaling.factor));
    meta.add_u32(a + "rope.scaling.original_context_length",
                 static_cast<std::uint32_t>(c.rope_scaling.original_max_position));
  }

  // Plain tensors under their GGUF names; experts stacked, expert-major.
  std::vector<TensorSpec> specs;
  std::vector<std::vector<const TensorView *>> sources;
  for (const std::string &name : st->names()) {
    if (name.find(".experts.") != std::string::npos) continue;
    const TensorView &t = st->get(name);
    std::string gname = ModelWeights::gguf_name_from_hf(name);
    if (oss && name.ends_with("post_attention_layernorm.weight"))  // llama.cpp's gpt-oss name
      gname.replace(gname.find("ffn_norm"), 8, "post_attention_norm");
    specs.push_back({gname, t.dtype, t.shape});
    sources.push_back({&t});
  }
  const char *stacked[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  const ExpertMatrix which[] = {ExpertMatrix::kGate, ExpertMatrix::kUp, ExpertMatrix::kDown};
  for (std::int64_t l = 0; l < c.num_layers; ++l)
    for (int j = 0; j < 3 && m.sparse(l); ++j) {
      std::vector<const TensorView *> parts;
      for (std::int64_t e = 0; e < m.num_experts; ++e)
        parts.push_back(&st->get(moe_expert_name(m, l, e, which[j])));
      specs.push_back({"blk." + std::to_string(l) + "." + stacked[j] + ".weight",
                       DType::kF32,
                       {m.num_experts, parts[0]->shape[0], parts[0]->shape[1]}});
      sources.push_back(parts);
      if (!m.expert_bias) continue;  // gpt-oss: the biases stacked too, [E, n]
      std::vector<const TensorView *> biases;
      for (std::int64_t e = 0; e < m.num_experts; ++e)
        biases.push_back(&st->get(moe_expert_bias_name(m, l, e, which[j])));
      specs.push_back({"blk." + std::to_string(l) + "." + stacked[j] + ".bias",
                       DType::kF32,
                       {m.num_experts, biases[0]->shape[0]}});
      sources.push_back(biases);
    }
  const auto gguf = base / "moe.gguf";
  {
    GgufWriter w(gguf, meta, specs);
    write_stacked(w, sources);
  }

  ExecContext ctx(2);
  auto from_st = cpu::CpuModelRunner::open(base / "st", ctx, {64, 16});
  auto from_gguf = cpu::CpuModelRunner::open(gguf, ctx, {64, 16});
  std::filesystem::remove_all(base);
  ASSERT_TRUE(from_gguf->config().moe);
  EXPECT_EQ(from_gguf->config().moe->num_experts, m.num_experts);
  EXPECT_EQ(from_gguf->config().moe->scoring, m.scoring);
  EXPECT_EQ(from_gguf->config().partial_rotary_factor, c.partial_rotary_factor);
  EXPECT_EQ(from_gguf->config().attention_sinks, c.attention_sinks);
  EXPECT_EQ(from_gguf->config().sliding_layers, c.sliding_layers);
  EXPECT_EQ(from_gguf->config().rope_scaling.truncate, c.rope_scaling.truncate);
  const int V = static_cast<int>(c.vocab_size);
  std::vector<ForwardOutput> outs;
  for (cpu::CpuModelRunner *r : {from_st.get(), from_gguf.get()}) {
    BlockHandout blocks(64, 3);
    PagedSeq seq;
    seq.tokens = prompt(4, 21, V);
    outs.push_back(run_step(*r, blocks, {{&seq, 21, SequenceSlice::Logits::kAll}}));
  }
  ASSERT_EQ(outs[0].logits.size(), outs[1].logits.size());
  EXPECT_EQ(0, std::memcmp(outs[0].logits.data(), outs[1].logits.data(),
                           outs[0].logits.size() * sizeof(float)));
}

TEST(CpuMoe, GgufWithStackedExpertsMatchesSafetensors) { gguf_matches_safetensors("qwen3_moe"); }
TEST(CpuMoe, Glm4MoeGgufMatchesSafetensors) { gguf_matches_safetensors("glm4_moe"); }
// llama.cpp's gpt-oss: stacked experts with stacked biases, attn_sinks, ffn_gate_inp.bias,
// post_attention_norm, the window and YaRN from the keys.
TEST(CpuMoe, GptOssGgufMatchesSafetensors) { gguf_matches_safetensors("gpt_oss"); }

// The same qwen3_moe with its experts fused as transformers 5 keeps them
// (mlp.experts.gate_up_proj [E, 2I, hidden], mlp.experts.down_proj [E, hidden, I]).
TEST(CpuMoe, FusedExpertTensorsMatchPerExpertOnes) {
  const auto base =
      std::filesystem::temp_directory_path() / ("keel-moe-fused-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  MakeModelOptions o;
  o.arch = "qwen3_moe";
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.seed = 9;
  o.out = base / "st";
  o.threads = 2;
  make_model(o);
  const auto st = ModelWeights::open(base / "st");
  const ModelConfig &c = st->config();
  const MoeConfig &m = *c.moe;
  std::vector<TensorSpec> specs;
  std::vector<std::vector<const TensorView *>> sources;
  for (const std::string &name : st->names()) {
    if (name.find(".experts.") != std::string::npos) continue;
    const TensorView &t = st->get(name);
    specs.push_back({name, t.dtype, t.shape});
    sources.push_back({&t});
  }
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    std::vector<const TensorView *> gu, down;
    for (std::int64_t e = 0; e < m.num_experts; ++e) {
      gu.push_back(&st->get(moe_expert_name(m, l, e, ExpertMatrix::kGate)));
      gu.push_back(&st->get(moe_expert_name(m, l, e, ExpertMatrix::kUp)));
      down.push_back(&st->get(moe_expert_name(m, l, e, ExpertMatrix::kDown)));
    }
    specs.push_back({p + "gate_up_proj",
                     DType::kBF16,
                     {m.num_experts, 2 * m.expert_intermediate, c.hidden_size}});
    sources.push_back(gu);
    specs.push_back(
        {p + "down_proj", DType::kBF16, {m.num_experts, c.hidden_size, m.expert_intermediate}});
    sources.push_back(down);
  }
  std::filesystem::create_directories(base / "fused");
  std::filesystem::copy_file(base / "st" / "config.json", base / "fused" / "config.json");
  {
    SafetensorsWriter w(base / "fused" / "model.safetensors", specs);
    write_stacked(w, sources);
  }
  ExecContext ctx(2);
  auto per_expert = cpu::CpuModelRunner::open(base / "st", ctx, {64, 16});
  auto fused = cpu::CpuModelRunner::open(base / "fused", ctx, {64, 16});
  std::filesystem::remove_all(base);
  const int V = static_cast<int>(c.vocab_size);
  std::vector<ForwardOutput> outs;
  for (cpu::CpuModelRunner *r : {per_expert.get(), fused.get()}) {
    BlockHandout blocks(64, 3);
    PagedSeq seq;
    seq.tokens = prompt(6, 19, V);
    outs.push_back(run_step(*r, blocks, {{&seq, 19, SequenceSlice::Logits::kAll}}));
  }
  ASSERT_EQ(outs[0].logits.size(), outs[1].logits.size());
  EXPECT_EQ(0, std::memcmp(outs[0].logits.data(), outs[1].logits.data(),
                           outs[0].logits.size() * sizeof(float)));
}

// GLM-4.5's multi-token-prediction layer (model.layers.{num_hidden_layers}, counted by
// num_nextn_predict_layers) is mapped with the checkpoint but never read: a checkpoint
// that carries one gives the same logits as the same checkpoint without it.
TEST(CpuMoe, Glm4MoeMtpLayerIsLoadedButUnused) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("keel-glm-mtp-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = "glm4_moe";
  o.shape = "tiny";
  o.dtype = DType::kF32;
  o.seed = 12;
  o.out = dir;
  o.threads = 2;
  make_model(o);
  ExecContext ctx(2);
  const std::vector<TokenId> tokens = prompt(3, 21, 512);
  auto logits_of = [&](const std::filesystem::path &d) {
    auto runner = cpu::CpuModelRunner::open(d, ctx, {64, 16});
    BlockHandout blocks(64, 5);
    PagedSeq seq;
    seq.tokens = tokens;
    return run_step(*runner, blocks, {{&seq, 21, SequenceSlice::Logits::kAll}}).logits;
  };
  const auto without = logits_of(dir);

  // The MTP layer's tensors in a second file, both files in an index, the config saying 1.
  const std::int64_t L = make_model_config(o).num_layers;
  const std::string mtp = "model.layers." + std::to_string(L) + ".";
  const std::vector<TensorSpec> specs = {
      {mtp + "eh_proj.weight", DType::kF32, {64, 128}},
      {mtp + "mlp.experts.0.gate_proj.weight", DType::kF32, {32, 64}}};
  {
    SafetensorsWriter w(dir / "mtp.safetensors", specs);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const std::vector<float> v(static_cast<std::size_t>(specs[i].shape[0] * specs[i].shape[1]),
                                 0.5f);
      w.write(i, 0, std::as_bytes(std::span<const float>(v)));
    }
    w.commit();
  }
  nlohmann::json index;
  for (const std::string &name : ModelWeights::open(dir)->names())
    index["weight_map"][name] = "model.safetensors";
  for (const TensorSpec &t : specs) index["weight_map"][t.name] = "mtp.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  nlohmann::json cfg;
  std::ifstream(dir / "config.json") >> cfg;
  cfg["num_nextn_predict_layers"] = 1;
  std::ofstream(dir / "config.json") << cfg.dump();

  const auto w = ModelWeights::open(dir);
  EXPECT_EQ(w->config().moe->nextn_predict_layers, 1);
  EXPECT_TRUE(w->find(mtp + "eh_proj.weight"));  // mapped with the rest
  const auto with = logits_of(dir);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(with.size(), without.size());
  EXPECT_EQ(0, std::memcmp(with.data(), without.data(), with.size() * sizeof(float)));
}

}  // namespace
}  // namespace keel::test
