#include "formats/make_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "formats/gguf_writer.h"
#include "formats/make_mla_model.h"
#include "formats/model_tokenizer.h"
#include "formats/model_weights.h"
#include "formats/mxfp4.h"
#include "formats/quant.h"
#include "formats/safetensors_writer.h"

namespace keel {

namespace {

// Qwen3's chat template, less its tool and earlier-reasoning handling.
constexpr const char *kQwen3ChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";

using nlohmann::ordered_json;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t hash_name(std::uint64_t seed, const std::string &name) {
  std::uint64_t h = splitmix64(seed ^ 0x6b65656cull);  // "keel"
  for (unsigned char c : name) h = splitmix64(h ^ c);
  return h;
}

// How each tensor's values are made.
enum class Init { kNormal, kOnes };

struct PlannedTensor {
  TensorSpec spec;  // as written (GGUF name and dtype, or HF)
  std::string hf_name;
  Init init = Init::kNormal;
  float std = 0.02f;
  std::int64_t permute_heads = 0;  // > 0: llama.cpp's q/k row permutation with this many heads
  // Generated as [rows, cols] (spec.shape unless set) in `quant` (spec.dtype unless set).
  std::vector<std::int64_t> gen_shape;
  std::optional<DType> quant;
  // An MXFP4 pair in gpt-oss's form: spec is <name>_blocks, this the index of <name>_scales.
  std::optional<std::size_t> scales_spec;

  const std::vector<std::int64_t> &shape() const {
    return gen_shape.empty() ? spec.shape : gen_shape;
  }
  DType gen_dtype() const { return quant.value_or(spec.dtype); }
  // FP8 weights: the index of their scale tensor in the plan (written with the weight's
  // rows); scale tensors themselves have no work of their own.
  std::optional<std::size_t> fp8_scale;
  bool is_scale = false;
};

constexpr std::int64_t kFp8Block = 128;
// Irwin-Hall normals are bounded by 2 * sqrt(3): a per-tensor scale needs no pass over the data.
constexpr float kNormalBound = 3.4641017f;

struct WorkUnit {
  std::size_t tensor;
  std::int64_t row0, rows;
};

}  // namespace

float random_normal(std::uint64_t tensor_seed, std::uint64_t i) {
  // Irwin-Hall: four 16-bit uniforms summed (variance 4/12), rescaled to unit variance.
  // Cheap, bounded (|x| < 3.5) and close enough to normal for random weights.
  const std::uint64_t h = splitmix64(tensor_seed + i * 0x9e3779b97f4a7c15ull);
  const float s =
      static_cast<float>((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48));
  return (s / 65535.0f - 2.0f) * 1.7320508f;
}

namespace {
RopeScaling llama3_scaling(double factor) {
  RopeScaling r;
  r.type = RopeScaling::Type::kLlama3;
  r.factor = factor;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position = 8192;
  return r;
}
}  // namespace

// GLM-4.5: sigmoid routing over groups with a correction bias, one shared expert, the
// first layer dense, half of each head rotated, q/k/v biases.
static void apply_glm4_moe_shape(ModelConfig &c, MoeConfig &m, const std::string &shape) {
  m.scoring = MoeConfig::Scoring::kSigmoid;
  c.attention_bias = true;
  c.partial_rotary_factor = 0.5;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-5;
  if (shape == "tiny") {
    c.hidden_size = 64, c.intermediate_size = 192, c.num_layers = 3, c.num_heads = 4,
    c.num_kv_heads = 2, c.head_dim = 32;
    c.vocab_size = 512, c.max_position_embeddings = 4096;
    m.num_experts = 8, m.top_k = 2, m.expert_intermediate = 32;
    m.n_group = 2, m.topk_group = 1, m.routed_scaling_factor = 2.5;
    c.qk_norm = true;
  } else if (shape == "small") {
    // GLM-4.5-Air's proportions at about a tenth of its width and depth.
    c.hidden_size = 512, c.intermediate_size = 1408, c.num_layers = 8, c.num_heads = 8,
    c.num_kv_heads = 2, c.head_dim = 64;
    c.vocab_size = 32000, c.max_position_embeddings = 131072;
    m.num_experts = 64, m.top_k = 8, m.expert_intermediate = 176;
    m.routed_scaling_factor = 1.0;
  } else if (shape == "glm-4.5-air") {
    c.hidden_size = 4096, c.intermediate_size = 10944, c.num_layers = 46, c.num_heads = 96,
    c.num_kv_heads = 8, c.head_dim = 128;
    c.vocab_size = 151552, c.max_position_embeddings = 131072;
    m.num_experts = 128, m.top_k = 8, m.expert_intermediate = 1408;
    m.routed_scaling_factor = 1.0;
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "--shape: expected tiny, small or glm-4.5-air for glm4_moe, got " + shape);
  }
  m.shared_intermediate = m.expert_intermediate;  // n_shared_experts = 1
}

// gpt-oss: q/k/v/o biases and attention sinks, a window of sliding_window on every other
// layer (from the first), YaRN (factor 32 over 4096, not truncated), a biased router
// softmaxed over its top k, experts with biases and the clamped SwiGLU.
static void apply_gpt_oss_shape(ModelConfig &c, MoeConfig &m, const std::string &shape) {
  m.scoring = MoeConfig::Scoring::kTopkSoftmax;
  m.router_bias = true;
  m.expert_bias = true;
  m.swiglu_limit = 7.0;
  c.attention_bias = true;
  c.attention_out_bias = true;
  c.attention_sinks = true;
  c.rope_theta = 150000.0;
  c.rms_norm_eps = 1e-5;
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 32.0;
  c.rope_scaling.original_max_position = 4096;
  c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0;
  c.rope_scaling.truncate = false;
  c.max_position_embeddings = 131072;
  c.sliding_window = 128;
  if (shape == "tiny") {
    // A window of 16, so that short test prompts see it.
    c.hidden_size = 64, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 16;
    c.vocab_size = 512, c.sliding_window = 16;
    m.num_experts = 8, m.top_k = 2, m.expert_intermediate = 64;
  } else if (shape == "small") {
    // gpt-oss-20b's proportions at about a fifth of its width and depth.
    c.hidden_size = 576, c.num_layers = 6, c.num_heads = 16, c.num_kv_heads = 2, c.head_dim = 64;
    c.vocab_size = 32000;
    m.num_experts = 32, m.top_k = 4, m.expert_intermediate = 576;
  } else if (shape == "gpt-oss-20b" || shape == "gpt-oss-120b") {
    c.hidden_size = 2880, c.num_layers = shape == "gpt-oss-20b" ? 24 : 36, c.num_heads = 64,
    c.num_kv_heads = 8, c.head_dim = 64;
    c.vocab_size = 201088;
    m.num_experts = shape == "gpt-oss-20b" ? 32 : 128, m.top_k = 4, m.expert_intermediate = 2880;
  } else {
    throw Error(
        ErrorCode::kInvalidArgument,
        "--shape: expected tiny, small, gpt-oss-20b or gpt-oss-120b for gpt_oss, got " + shape);
  }
  c.intermediate_size = m.expert_intermediate;
}

// For a dense architecture given a mixture-of-experts shape: the --arch that has it.
static std::string moe_shape_hint(const std::string &shape) {
  static constexpr std::pair<const char *, const char *> kArchOf[] = {
      {"small", "qwen3_moe, mixtral, glm4_moe or gpt_oss"},
      {"qwen3-30b-a3b", "qwen3_moe"},
      {"mixtral-8x7b", "mixtral"},
      {"glm-4.5-air", "glm4_moe"},
      {"gpt-oss-20b", "gpt_oss"},
      {"gpt-oss-120b", "gpt_oss"},
      {"deepseek-v3", "deepseek_v3"},
      {"glm-5", "glm_moe_dsa"}};
  for (const auto &[name, arch] : kArchOf)
    if (shape == name)
      return " (" + shape + " is a mixture-of-experts shape: add --arch " + arch + ")";
  return "";
}

// The MoE shapes: "tiny" for tests, "small" for CPU benchmarks, and released models.
static void apply_moe_shape(ModelConfig &c, const std::string &shape) {
  MoeConfig m;
  m.norm_topk_prob = true;
  if (c.arch == Arch::kMixtral) m.naming = MoeConfig::Naming::kMixtral;
  c.tie_word_embeddings = false;
  if (c.arch == Arch::kGlm4Moe) {
    apply_glm4_moe_shape(c, m, shape);
  } else if (c.arch == Arch::kGptOss) {
    apply_gpt_oss_shape(c, m, shape);
  } else if (shape == "tiny") {
    c.hidden_size = 64, c.intermediate_size = 192, c.num_layers = 2, c.num_heads = 4,
    c.num_kv_heads = 2, c.head_dim = c.arch == Arch::kQwen3Moe ? 32 : 16;
    c.vocab_size = 512, c.max_position_embeddings = 4096;
    m.num_experts = 8, m.top_k = 2, m.expert_intermediate = 32;
  } else if (shape == "small" && c.arch == Arch::kQwen3Moe) {
    // Qwen3-30B-A3B's proportions at about a tenth of its width and depth.
    c.hidden_size = 512, c.intermediate_size = 1536, c.num_layers = 8, c.num_heads = 8,
    c.num_kv_heads = 2, c.head_dim = 64;
    c.vocab_size = 32000, c.max_position_embeddings = 40960;
    m.num_experts = 64, m.top_k = 8, m.expert_intermediate = 192;
  } else if (shape == "qwen3-30b-a3b" && c.arch == Arch::kQwen3Moe) {
    c.hidden_size = 2048, c.intermediate_size = 6144, c.num_layers = 48, c.num_heads = 32,
    c.num_kv_heads = 4, c.head_dim = 128;
    c.vocab_size = 151936, c.max_position_embeddings = 40960;
    m.num_experts = 128, m.top_k = 8, m.expert_intermediate = 768;
  } else if (shape == "mixtral-8x7b" && c.arch == Arch::kMixtral) {
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32, c.num_heads = 32,
    c.num_kv_heads = 8, c.head_dim = 128;
    c.vocab_size = 32000, c.max_position_embeddings = 32768;
    m.num_experts = 8, m.top_k = 2, m.expert_intermediate = 14336;
    c.rms_norm_eps = 1e-5;
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "--shape: expected " +
                    std::string(c.arch == Arch::kMixtral ? "tiny or mixtral-8x7b"
                                                         : "tiny, small or qwen3-30b-a3b") +
                    " for " + arch_name(c.arch) + ", got " + shape);
  }
  c.moe = m;
}

ModelConfig make_model_config(const MakeModelOptions &o) {
  ModelConfig c;
  c.arch_name = o.arch;
  if (o.arch == "llama") {
    c.arch = Arch::kLlama;
  } else if (o.arch == "qwen2") {
    c.arch = Arch::kQwen2;
    c.attention_bias = true;
  } else if (o.arch == "qwen3") {
    c.arch = Arch::kQwen3;
    c.qk_norm = true;
  } else if (o.arch == "qwen3_moe") {
    c.arch = Arch::kQwen3Moe;
    c.qk_norm = true;
  } else if (o.arch == "mixtral") {
    c.arch = Arch::kMixtral;
  } else if (o.arch == "glm4_moe") {
    c.arch = Arch::kGlm4Moe;
  } else if (o.arch == "gpt_oss") {
    c.arch = Arch::kGptOss;
  } else if (o.arch == "deepseek_v3") {
    c.arch = Arch::kDeepseekV3;
  } else if (o.arch == "glm_moe_dsa") {
    c.arch = Arch::kGlmMoeDsa;
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "--arch: expected llama, qwen2, qwen3, qwen3_moe, mixtral, glm4_moe, gpt_oss, "
                "deepseek_v3 or glm_moe_dsa, got " +
                    o.arch);
  }
  const bool mla = c.arch == Arch::kDeepseekV3 || c.arch == Arch::kGlmMoeDsa;
  const bool llama = c.arch == Arch::kLlama;
  c.rms_norm_eps = llama ? 1e-5 : 1e-6;
  c.rope_theta = llama ? 500000.0 : 1000000.0;
  if (mla) {
    MoeConfig m;
    apply_mla_shape(c, m, o.shape);
    c.moe = m;
  } else if (c.arch == Arch::kQwen3Moe || c.arch == Arch::kMixtral || c.arch == Arch::kGlm4Moe ||
             c.arch == Arch::kGptOss) {
    apply_moe_shape(c, o.shape);
  } else if (o.shape == "tiny") {
    c.hidden_size = 64, c.intermediate_size = 192, c.num_layers = 2, c.num_heads = 4,
    c.num_kv_heads = 2;
    c.vocab_size = 512, c.max_position_embeddings = 4096, c.tie_word_embeddings = false;
    c.head_dim = c.arch == Arch::kQwen3 ? 32 : 16;  // qwen3: head_dim != hidden / heads
  } else if (o.shape == "100m") {
    c.hidden_size = 768, c.intermediate_size = 2048, c.num_layers = 12, c.num_heads = 12,
    c.num_kv_heads = 4;
    c.vocab_size = 32000, c.max_position_embeddings = 8192, c.tie_word_embeddings = true,
    c.head_dim = 64;
  } else if (o.shape == "1b") {  // Llama 3.2 1B
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_layers = 16, c.num_heads = 32,
    c.num_kv_heads = 8;
    c.vocab_size = 128256, c.max_position_embeddings = 131072, c.tie_word_embeddings = true,
    c.head_dim = 64;
    if (llama) c.rope_scaling = llama3_scaling(32.0);
  } else if (o.shape == "8b") {  // Llama 3.1 8B
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32, c.num_heads = 32,
    c.num_kv_heads = 8;
    c.vocab_size = 128256, c.max_position_embeddings = 131072, c.tie_word_embeddings = false,
    c.head_dim = 128;
    if (llama) c.rope_scaling = llama3_scaling(8.0);
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "--shape: expected tiny, 100m, 1b or 8b, got " + o.shape + moe_shape_hint(o.shape));
  }
  if (o.hidden) c.hidden_size = *o.hidden;
  if (o.intermediate) c.intermediate_size = *o.intermediate;
  if (o.layers) c.num_layers = *o.layers;
  if (o.heads) c.num_heads = *o.heads;
  if (o.kv_heads) c.num_kv_heads = *o.kv_heads;
  if (o.q_lora_rank) {
    if (c.arch != Arch::kDeepseekV3 || *o.q_lora_rank < 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "--q-lora-rank: deepseek_v3 only, 0 (a plain q_proj) or more");
    c.mla->q_lora_rank = *o.q_lora_rank;
  }
  if (mla) {
    if (o.head_dim || o.kv_heads)
      throw Error(ErrorCode::kInvalidArgument,
                  "--head-dim and --kv-heads do not apply to multi-head latent attention");
  } else if (o.head_dim) {
    c.head_dim = *o.head_dim;
  } else if (o.hidden || o.heads) {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "--hidden must be a multiple of --heads (or give --head-dim)");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (o.vocab) c.vocab_size = *o.vocab;
  if (o.tie) c.tie_word_embeddings = *o.tie;
  if (c.moe) {
    if (o.experts) c.moe->num_experts = *o.experts;
    if (o.experts_per_tok) c.moe->top_k = *o.experts_per_tok;
    if (o.moe_intermediate) c.moe->expert_intermediate = *o.moe_intermediate;
    if (c.arch == Arch::kMixtral || c.arch == Arch::kGptOss) {  // experts of intermediate_size
      if (o.intermediate) c.moe->expert_intermediate = *o.intermediate;
      c.intermediate_size = c.moe->expert_intermediate;
    }
    if (c.arch == Arch::kGptOss) {  // sliding, full, sliding, ... as released
      c.sliding_layers.clear();
      for (std::int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers.push_back(l % 2 == 0);
    }
    c.moe->sparse_layers.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.num_layers, 0)),
                                true);
    if (c.arch == Arch::kGlm4Moe) {  // first_k_dense_replace = 1, one shared expert
      if (!c.moe->sparse_layers.empty()) c.moe->sparse_layers[0] = false;
      c.moe->shared_intermediate = c.moe->expert_intermediate;
    }
    if (mla) {
      c.moe->shared_intermediate = c.moe->expert_intermediate;
      finish_mla_config(c, o.shape);
    }
  } else if (o.experts || o.experts_per_tok || o.moe_intermediate) {
    throw Error(ErrorCode::kInvalidArgument,
                "--experts, --experts-per-tok and --moe-intermediate need a MoE --arch");
  }
  if (o.mtp_layers != 0) {
    if (o.mtp_layers < 0 || o.mtp_layers > 4)
      throw Error(ErrorCode::kInvalidArgument, "--mtp-layers: expected 0 to 4");
    if ((c.arch != Arch::kGlm4Moe && c.arch != Arch::kDeepseekV3 && c.arch != Arch::kGlmMoeDsa) ||
        o.gguf || o.dtype == DType::kF8_E4M3 || o.dtype == DType::kMXFP4)
      throw Error(ErrorCode::kInvalidArgument,
                  "--mtp-layers: glm4_moe, deepseek_v3 or glm_moe_dsa safetensors (f32, f16, "
                  "bf16) only for now");
    c.moe->nextn_predict_layers = o.mtp_layers;
  }
  if (dtype_is_quantized(o.dtype)) {
    const std::int64_t blk = dtype_info(o.dtype).block_elems;
    if (c.hidden_size % blk || c.intermediate_size % blk || (c.num_heads * c.head_dim) % blk)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(dtype_name(o.dtype)) +
                      ": hidden, intermediate and heads x head_dim must be "
                      "multiples of " +
                      std::to_string(blk));
  }
  try {
    validate_config(c, "make-model");
  } catch (const Error &e) {
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
  return c;
}

namespace {

// gpt-oss's released expert layout (formats/gpt_oss_layout.h), which keel's loader turns
// into per-expert tensors: the router as mlp.router, experts fused with gate and up
// interleaved; bf16 / f32 as transformers holds them ([E, h, 2I], [E, I, h]), MXFP4 as
// the release's _blocks / _scales pairs ([E, 2I, h / 32, 16], [E, h, I / 32, 16]); biases
// in the dtype of the rest (bf16 beside MXFP4).
// GGUF (llama.cpp's gpt-oss): the router as ffn_gate_inp.{weight,bias}, experts stacked
// with gate and up apart, blk.L.ffn_{gate,up,down}_exps.weight [E, I, h] / [E, h, I] and
// their biases .bias [E, I] / [E, h] in f32.
template <class Add>
void plan_gpt_oss_experts(const ModelConfig &c, std::int64_t l, DType dtype, bool gguf, Add &add,
                          std::vector<PlannedTensor> &out) {
  const MoeConfig &m = *c.moe;
  const std::int64_t E = m.num_experts, I = m.expert_intermediate, h = c.hidden_size;
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
  const DType plain = dtype == DType::kMXFP4 ? DType::kBF16 : DType::kI32;  // kI32: dtype
  if (gguf) {
    add(moe_router_name(m, l), {E, h}, Init::kNormal, 1.0f, 0, plain);
    add(moe_router_logit_bias_name(m, l), {E}, Init::kNormal, 0.1f);
    auto stacked = [&](const char *which, std::int64_t rows, std::int64_t cols) {
      const std::string name = "blk." + std::to_string(l) + ".ffn_" + which + "_exps.";
      add(name + "weight", {E, rows, cols}, Init::kNormal);
      out.back().spec.dtype = dtype;  // MXFP4 stays MXFP4 here
      out.back().gen_shape = {E * rows, cols};
      add(name + "bias", {E, rows}, Init::kNormal, 0.02f, 0, DType::kF32);
    };
    stacked("gate", I, h);
    stacked("up", I, h);
    stacked("down", h, I);
    return;
  }
  // A router far from uniform, so that random tokens spread over the experts.
  add(p + "router.weight", {E, h}, Init::kNormal, 1.0f, 0, plain);
  add(p + "router.bias", {E}, Init::kNormal, 0.1f, 0, plain);
  auto fused = [&](const std::string &name, std::int64_t rows, std::int64_t cols) {
    if (dtype == DType::kMXFP4) {
      add(name + "_blocks", {E, rows, cols / kMxfp4BlockElems, 16}, Init::kNormal, 0.02f, 0,
          DType::kI8);
      PlannedTensor &b = out.back();
      b.hf_name = name;
      b.spec.st_dtype = "U8";
      b.gen_shape = {E * rows, cols};
      b.quant = DType::kMXFP4;
      b.scales_spec = out.size();  // the next spec
      TensorSpec sc{name + "_scales", DType::kI8, {E, rows, cols / kMxfp4BlockElems}};
      sc.st_dtype = "U8";
      PlannedTensor st;
      st.spec = std::move(sc);
      st.hf_name = name + "_scales";
      out.push_back(std::move(st));
    } else {  // transformers' [E, in, out]
      add(name, {E, cols, rows}, Init::kNormal);
      out.back().gen_shape = {E * cols, rows};
    }
  };
  fused(p + "experts.gate_up_proj", 2 * I, h);
  add(p + "experts.gate_up_proj_bias", {E, 2 * I}, Init::kNormal, 0.02f, 0, plain);
  fused(p + "experts.down_proj", h, I);
  add(p + "experts.down_proj_bias", {E, h}, Init::kNormal, 0.02f, 0, plain);
}

std::vector<PlannedTensor> plan_tensors(const ModelConfig &c, DType dtype, bool gguf,
                                        bool k_quant_mix) {
  std::vector<PlannedTensor> out;
  const std::int64_t h = c.hidden_size, q = c.num_heads * c.head_dim,
                     kv = c.num_kv_heads * c.head_dim;
  auto add = [&](const std::string &name, std::vector<std::int64_t> shape, Init init,
                 float std = 0.02f, std::int64_t permute = 0, DType as = DType::kI32) {
    PlannedTensor t;
    t.hf_name = name;
    t.spec.name = gguf ? ModelWeights::gguf_name_from_hf(name) : name;
    // GGUF keeps 1-D tensors (norms, biases) in f32, as llama.cpp's converter does.
    t.spec.dtype = gguf && shape.size() == 1 ? DType::kF32 : as != DType::kI32 ? as : dtype;
    // MXFP4 (as llama.cpp and gpt-oss): linear weights only; the embedding stays bf16, and
    // in safetensors only the experts are MXFP4 (gpt-oss's pairs, below).
    // (gpt-oss in GGUF too: only its experts, below.)
    if (dtype == DType::kMXFP4 && t.spec.dtype == DType::kMXFP4 &&
        (!gguf || name == "model.embed_tokens.weight" || c.arch == Arch::kGptOss))
      t.spec.dtype = DType::kBF16;
    t.spec.shape = std::move(shape);
    t.init = init;
    t.std = std;
    t.permute_heads = gguf && c.arch == Arch::kLlama ? permute : 0;
    out.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, Init::kNormal);
  // GLM-4.5's and DeepSeek-V3's MTP layers follow the decoder layers: a sparse layer plus
  // the MTP tensors (its own shared_head.head; the target's embedding, as embed_tokens is
  // not written).
  const std::int64_t mtp = c.moe ? c.moe->nextn_predict_layers : 0;
  for (std::int64_t l = 0; l < c.num_layers + mtp; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool sparse = c.moe && (l >= c.num_layers || c.moe->sparse(l));
    if (l >= c.num_layers) {
      add(p + "enorm.weight", {h}, Init::kOnes);
      add(p + "hnorm.weight", {h}, Init::kOnes);
      add(p + "eh_proj.weight", {h, 2 * h}, Init::kNormal, 0.1f);
      add(p + "shared_head.norm.weight", {h}, Init::kOnes);
      add(p + "shared_head.head.weight", {c.vocab_size, h}, Init::kNormal);
    }
    add(p + "input_layernorm.weight", {h}, Init::kOnes);
    const std::int64_t n = c.num_layers;
    const bool more_bits = k_quant_mix && (l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2);
    const DType mixed = more_bits ? DType::kQ6_K : DType::kI32;
    if (c.mla) {  // multi-head latent attention (formats/mla_config.h)
      const MlaConfig &a = *c.mla;
      const std::int64_t H = c.num_heads, qk = a.qk_head_dim();
      if (a.q_lora_rank > 0) {
        add(mla_name(l, "q_a_proj.weight"), {a.q_lora_rank, h}, Init::kNormal);
        add(mla_name(l, "q_a_layernorm.weight"), {a.q_lora_rank}, Init::kOnes);
        add(mla_name(l, "q_b_proj.weight"), {H * qk, a.q_lora_rank}, Init::kNormal);
      } else {
        add(mla_name(l, "q_proj.weight"), {H * qk, h}, Init::kNormal);
      }
      add(mla_name(l, "kv_a_proj_with_mqa.weight"), {a.kv_lora_rank + a.qk_rope_head_dim, h},
          Init::kNormal);
      add(mla_name(l, "kv_a_layernorm.weight"), {a.kv_lora_rank}, Init::kOnes);
      add(mla_name(l, "kv_b_proj.weight"),
          {H * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank}, Init::kNormal);
      add(mla_name(l, "o_proj.weight"), {h, H * a.v_head_dim}, Init::kNormal);
      if (a.dsa() && !a.shared_selection(l)) {
        const std::int64_t Hi = a.index_n_heads, Di = a.index_head_dim;
        add(mla_name(l, "indexer.wq_b.weight"), {Hi * Di, a.q_lora_rank}, Init::kNormal);
        add(mla_name(l, "indexer.wk.weight"), {Di, h}, Init::kNormal);
        add(mla_name(l, "indexer.k_norm.weight"), {Di}, Init::kOnes);
        add(mla_name(l, "indexer.k_norm.bias"), {Di}, Init::kNormal);
        // Kept bf16 in the FP8 releases (a 1-D-like router of the heads): not a linear.
        add(mla_name(l, "indexer.weights_proj.weight"), {Hi, h}, Init::kNormal, 0.02f, 0,
            dtype == DType::kF8_E4M3 ? DType::kBF16 : DType::kI32);
      }
    }
    if (!c.mla) {
      add(p + "self_attn.q_proj.weight", {q, h}, Init::kNormal, 0.02f, c.num_heads);
      add(p + "self_attn.k_proj.weight", {kv, h}, Init::kNormal, 0.02f, c.num_kv_heads);
      add(p + "self_attn.v_proj.weight", {kv, h}, Init::kNormal, 0.02f, 0, mixed);
      if (c.attention_bias) {
        add(p + "self_attn.q_proj.bias", {q}, Init::kNormal, 0.02f, c.num_heads);
        add(p + "self_attn.k_proj.bias", {kv}, Init::kNormal, 0.02f, c.num_kv_heads);
        add(p + "self_attn.v_proj.bias", {kv}, Init::kNormal);
      }
      if (c.qk_norm) {
        add(p + "self_attn.q_norm.weight", {c.head_dim}, Init::kOnes);
        add(p + "self_attn.k_norm.weight", {c.head_dim}, Init::kOnes);
      }
      add(p + "self_attn.o_proj.weight", {h, q}, Init::kNormal);
      if (c.attention_out_bias) add(p + "self_attn.o_proj.bias", {h}, Init::kNormal);
      if (c.attention_sinks) add(attention_sinks_name(l), {c.num_heads}, Init::kNormal, 1.0f);
    }
    add(p + "post_attention_layernorm.weight", {h}, Init::kOnes);
    if (gguf && c.arch == Arch::kGptOss)  // llama.cpp's gpt-oss names it so
      out.back().spec.name = "blk." + std::to_string(l) + ".post_attention_norm.weight";
    if (sparse && c.arch == Arch::kGptOss) {
      plan_gpt_oss_experts(c, l, dtype, gguf, add, out);
      continue;
    }
    if (sparse) {
      const MoeConfig &m = *c.moe;
      const std::int64_t I = m.expert_intermediate;
      // A router far from uniform, so that random tokens spread over the experts.
      add(moe_router_name(m, l), {m.num_experts, h}, Init::kNormal, 1.0f);
      if (dtype == DType::kMXFP4 && !gguf) {
        // gpt-oss's form: experts fused, [E, 2I, h] (gate rows then up rows) and
        // [E, h, I], each as a _blocks / _scales pair.
        auto pair = [&](const std::string &name, std::int64_t rows, std::int64_t cols) {
          add(name + "_blocks", {m.num_experts, rows, cols / kMxfp4BlockElems, 16}, Init::kNormal,
              0.02f, 0, DType::kI8);
          PlannedTensor &b = out.back();
          b.hf_name = name;
          b.spec.st_dtype = "U8";
          b.gen_shape = {m.num_experts * rows, cols};
          b.quant = DType::kMXFP4;
          b.scales_spec = out.size();  // the next spec
          TensorSpec sc{
              name + "_scales", DType::kI8, {m.num_experts, rows, cols / kMxfp4BlockElems}};
          sc.st_dtype = "U8";
          PlannedTensor st;
          st.spec = std::move(sc);
          st.hf_name = name + "_scales";
          out.push_back(std::move(st));
        };
        pair(p + "mlp.experts.gate_up_proj", 2 * I, h);
        pair(p + "mlp.experts.down_proj", h, I);
        continue;
      }
      if (gguf) {
        // llama.cpp's qwen3moe: a layer's experts stacked, [E, I, h] and [E, h, I].
        auto stacked = [&](const char *which, std::int64_t rows, std::int64_t cols) {
          const std::string name = "blk." + std::to_string(l) + ".ffn_" + which + "_exps.weight";
          add(name, {m.num_experts, rows, cols}, Init::kNormal);
          out.back().spec.name = name;
          out.back().gen_shape = {m.num_experts * rows, cols};
        };
        stacked("gate", I, h);
        stacked("up", I, h);
        stacked("down", h, I);
        if (m.scoring == MoeConfig::Scoring::kSigmoid)  // deepseek2: exp_probs_b.bias, f32
          add(moe_router_bias_name(m, l), {m.num_experts}, Init::kNormal, 0.1f, 0, DType::kF32);
        if (const std::int64_t S = m.shared_intermediate; S > 0) {  // ffn_*_shexp
          add(moe_shared_name(m, l, ExpertMatrix::kGate), {S, h}, Init::kNormal);
          add(moe_shared_name(m, l, ExpertMatrix::kUp), {S, h}, Init::kNormal);
          add(moe_shared_name(m, l, ExpertMatrix::kDown), {h, S}, Init::kNormal);
        }
        continue;
      }
      for (std::int64_t e = 0; e < m.num_experts; ++e) {
        add(moe_expert_name(m, l, e, ExpertMatrix::kGate), {I, h}, Init::kNormal);
        add(moe_expert_name(m, l, e, ExpertMatrix::kUp), {I, h}, Init::kNormal);
        add(moe_expert_name(m, l, e, ExpertMatrix::kDown), {h, I}, Init::kNormal);
      }
      if (m.scoring == MoeConfig::Scoring::kSigmoid)  // kept in float32, as released
        add(moe_router_bias_name(m, l), {m.num_experts}, Init::kNormal, 0.1f, 0, DType::kF32);
      if (const std::int64_t S = m.shared_intermediate; S > 0) {
        add(moe_shared_name(m, l, ExpertMatrix::kGate), {S, h}, Init::kNormal);
        add(moe_shared_name(m, l, ExpertMatrix::kUp), {S, h}, Init::kNormal);
        add(moe_shared_name(m, l, ExpertMatrix::kDown), {h, S}, Init::kNormal);
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {c.intermediate_size, h}, Init::kNormal);
    add(p + "mlp.up_proj.weight", {c.intermediate_size, h}, Init::kNormal);
    add(p + "mlp.down_proj.weight", {h, c.intermediate_size}, Init::kNormal, 0.02f, 0, mixed);
  }
  add("model.norm.weight", {h}, Init::kOnes);
  if (!c.tie_word_embeddings)
    add("lm_head.weight", {c.vocab_size, h}, Init::kNormal, 0.02f, 0,
        k_quant_mix ? DType::kQ6_K : DType::kI32);
  return out;
}

// FP8: linear weights stay e4m3 and get a scale tensor; the rest becomes bf16 (the
// releases keep embeddings, norms, lm_head and MoE routers unquantized).
std::vector<PlannedTensor> plan_fp8(std::vector<PlannedTensor> in, const ModelConfig &c,
                                    const std::string &scale) {
  std::vector<PlannedTensor> out;
  for (auto &t : in) {
    if (t.spec.dtype != DType::kF8_E4M3) {
      out.push_back(std::move(t));
      continue;
    }
    const bool linear = t.spec.shape.size() == 2 && t.hf_name != "model.embed_tokens.weight" &&
                        t.hf_name != "lm_head.weight" &&
                        !(c.moe && t.hf_name.ends_with(".mlp.gate.weight"));
    if (!linear) {
      t.spec.dtype = DType::kBF16;
      out.push_back(std::move(t));
      continue;
    }
    const std::int64_t N = t.spec.shape[0], K = t.spec.shape[1];
    PlannedTensor s;
    s.hf_name = t.hf_name + (scale == "block" ? "_scale_inv" : "_scale");
    s.spec.name = s.hf_name;
    s.spec.dtype = DType::kF32;
    if (scale == "block")
      s.spec.shape = {(N + kFp8Block - 1) / kFp8Block, (K + kFp8Block - 1) / kFp8Block};
    else if (scale == "channel")
      s.spec.shape = {N, 1};
    else
      s.spec.shape = {1};
    s.is_scale = true;
    t.fp8_scale = out.size() + 1;
    out.push_back(std::move(t));
    out.push_back(std::move(s));
  }
  return out;
}

// Quantizes rows [row0, row0 + rows) of an FP8 weight (f32 in `x`, [rows, K]): the e4m3
// bytes into q and the rows' scales into `scales` (block: the block rows' grid; channel: one
// a row; tensor: one). Scales are amax / 448 (1 for an all-zero block).
void quantize_fp8_rows(const float *x, std::int64_t rows, std::int64_t K, float std_dev,
                       const std::string &mode, std::uint8_t *q, std::vector<float> &scales) {
  auto put = [&](std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1, float s) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t k = c0; k < c1; ++k) q[r * K + k] = float_to_fp8_e4m3(x[r * K + k] / s);
  };
  auto amax_scale = [&](std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
    float a = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t k = c0; k < c1; ++k) a = std::max(a, std::fabs(x[r * K + k]));
    return a > 0 ? a / 448.0f : 1.0f;
  };
  scales.clear();
  if (mode == "tensor") {
    const float s = std_dev > 0 ? std_dev * kNormalBound / 448.0f : 1.0f;
    put(0, rows, 0, K, s);
    scales.push_back(s);
  } else if (mode == "channel") {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float s = amax_scale(r, r + 1, 0, K);
      put(r, r + 1, 0, K, s);
      scales.push_back(s);
    }
  } else {
    for (std::int64_t r0 = 0; r0 < rows; r0 += kFp8Block) {
      const std::int64_t r1 = std::min(rows, r0 + kFp8Block);
      for (std::int64_t c0 = 0; c0 < K; c0 += kFp8Block) {
        const std::int64_t c1 = std::min(K, c0 + kFp8Block);
        const float s = amax_scale(r0, r1, c0, c1);
        put(r0, r1, c0, c1, s);
        scales.push_back(s);
      }
    }
  }
}

// llama.cpp's converter: rows of each head reordered from (half, i) to (i, half), so
// that rotary pairs (i, i + d/2) become adjacent. Returns the HF row of output row g.
std::int64_t permuted_source_row(std::int64_t g, std::int64_t rows, std::int64_t heads) {
  const std::int64_t hd = rows / heads, half = hd / 2;
  const std::int64_t head = g / hd, w = g % hd;
  const std::int64_t i = w / 2, s = w % 2;
  return head * hd + s * half + i;
}

// llama.cpp's llama3 rope factors (rope_freqs.weight): the divisor of each frequency.
std::vector<float> llama3_rope_factors(const ModelConfig &c) {
  const auto &r = c.rope_scaling;
  std::vector<float> out;
  const double low_wavelen = r.original_max_position / r.low_freq_factor;
  const double high_wavelen = r.original_max_position / r.high_freq_factor;
  for (std::int64_t i = 0; i < c.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / c.head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / r.factor + smooth)));
    }
  }
  return out;
}

const char *hf_architecture(Arch a) {
  switch (a) {
    case Arch::kQwen2:
      return "Qwen2ForCausalLM";
    case Arch::kQwen3:
      return "Qwen3ForCausalLM";
    case Arch::kMistral:
      return "MistralForCausalLM";
    case Arch::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Arch::kMixtral:
      return "MixtralForCausalLM";
    case Arch::kGlm4Moe:
      return "Glm4MoeForCausalLM";
    case Arch::kGptOss:
      return "GptOssForCausalLM";
    case Arch::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
    case Arch::kGlmMoeDsa:
      return "GlmMoeDsaForCausalLM";
    case Arch::kLlama:
      break;
  }
  return "LlamaForCausalLM";
}

const char *torch_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    default:
      return "bfloat16";
  }
}

ordered_json eos_json(const std::vector<TokenId> &eos) {
  if (eos.size() == 1) return eos.front();
  return eos;
}

ordered_json fp8_quantization_config(const std::string &scale) {
  if (scale == "block")
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {kFp8Block, kFp8Block}}};
  ordered_json weights = {{"num_bits", 8},
                          {"type", "float"},
                          {"strategy", scale},
                          {"symmetric", true},
                          {"dynamic", false}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
          {"ignore", {"lm_head"}}};
}

std::string hf_config_json(const ModelConfig &c, DType dtype, const std::string &fp8_scale) {
  ordered_json j;
  j["architectures"] = {hf_architecture(c.arch)};
  j["model_type"] = c.arch_name;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    j["rope_scaling"] = {{"factor", c.rope_scaling.factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position},
                         {"rope_type", "llama3"}};
  } else if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    j["rope_scaling"] = {{"beta_fast", c.rope_scaling.beta_fast},
                         {"beta_slow", c.rope_scaling.beta_slow},
                         {"factor", c.rope_scaling.factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position},
                         {"rope_type", "yarn"},
                         {"truncate", c.rope_scaling.truncate}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.arch != Arch::kQwen2) j["attention_bias"] = c.attention_bias;
  if (c.arch == Arch::kLlama) j["mlp_bias"] = false;
  if (c.moe && c.arch == Arch::kQwen3Moe) {
    j["num_experts"] = c.moe->num_experts;
    j["num_experts_per_tok"] = c.moe->top_k;
    j["moe_intermediate_size"] = c.moe->expert_intermediate;
    j["norm_topk_prob"] = c.moe->norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = ordered_json::array();
    j["router_aux_loss_coef"] = 0.001;
    j["output_router_logits"] = false;
  } else if (c.moe && c.arch == Arch::kMixtral) {
    j["num_local_experts"] = c.moe->num_experts;
    j["num_experts_per_tok"] = c.moe->top_k;
    j["router_aux_loss_coef"] = 0.02;
    j["sliding_window"] = nullptr;
  } else if (c.moe && c.arch == Arch::kGlm4Moe) {
    const MoeConfig &m = *c.moe;
    std::int64_t dense = 0;
    while (dense < c.num_layers && !m.sparse(dense)) ++dense;
    j["n_routed_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["moe_intermediate_size"] = m.expert_intermediate;
    j["n_shared_experts"] = m.shared_intermediate / m.expert_intermediate;
    j["first_k_dense_replace"] = dense;
    j["n_group"] = m.n_group;
    j["topk_group"] = m.topk_group;
    j["routed_scaling_factor"] = m.routed_scaling_factor;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["partial_rotary_factor"] = c.partial_rotary_factor;
    j["use_qk_norm"] = c.qk_norm;
    j["num_nextn_predict_layers"] = m.nextn_predict_layers;  // written after the layers
  } else if (c.moe && c.mla) {
    mla_config_json(c, j);
  } else if (c.moe && c.arch == Arch::kGptOss) {
    j["num_local_experts"] = c.moe->num_experts;
    j["num_experts_per_tok"] = c.moe->top_k;
    j["experts_per_token"] = c.moe->top_k;
    j["swiglu_limit"] = c.moe->swiglu_limit.value_or(7.0);
    j["router_aux_loss_coef"] = 0.9;
    j["output_router_logits"] = false;
    j["sliding_window"] = c.sliding_window.value_or(128);
    ordered_json types = ordered_json::array();
    for (std::int64_t l = 0; l < c.num_layers; ++l)
      types.push_back(c.window_of(l) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j["initial_context_length"] = c.rope_scaling.original_max_position;
  }
  if (c.arch == Arch::kQwen2 || c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_layers;
  }
  j["attention_dropout"] = 0.0;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = eos_json(c.eos_token_ids);
  j["torch_dtype"] = torch_dtype_name(dtype);
  if (dtype == DType::kMXFP4) j["quantization_config"] = {{"quant_method", "mxfp4"}};
  if (dtype == DType::kF8_E4M3) j["quantization_config"] = fp8_quantization_config(fp8_scale);
  j["use_cache"] = true;
  j["transformers_version"] = "4.46.0";
  return j.dump(2) + "\n";
}

std::string generation_config_json(const ModelConfig &c) {
  ordered_json j;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = eos_json(c.eos_token_ids);
  j["do_sample"] = false;
  j["transformers_version"] = "4.46.0";
  return j.dump(2) + "\n";
}

std::uint32_t gguf_file_type(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_K:
      return 14;  // llama.cpp's MOSTLY_Q4_K_S (all Q4_K); 15 for the Q4_K_M mix
    case DType::kQ5_K:
      return 16;  // MOSTLY_Q5_K_S; 17 for the Q5_K_M mix
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
    case DType::kMXFP4:
      return 38;  // llama.cpp's MOSTLY_MXFP4_MOE
    default:
      return 0;
  }
}

GgufMetadata gguf_metadata(const ModelConfig &c, const MakeModelOptions &o,
                           const ModelTokenizer &tok) {
  GgufMetadata m;
  const std::string arch = c.arch == Arch::kQwen3Moe     ? "qwen3moe"  // llama.cpp's names
                           : c.arch == Arch::kGptOss     ? "gpt-oss"
                           : c.arch == Arch::kDeepseekV3 ? "deepseek2"
                                                         : c.arch_name;
  const std::string a = arch + ".";
  m.add_string("general.architecture", arch);
  m.add_string("general.name", "keel random " + c.arch_name + " " + o.shape);
  m.add_u32("general.file_type",
            o.k_quant_mix ? (o.dtype == DType::kQ5_K ? 17 : 15) : gguf_file_type(o.dtype));
  m.add_u32("general.quantization_version", 2);
  m.add_u32("general.alignment", static_cast<std::uint32_t>(GgufWriter::kAlignment));
  m.add_u32(a + "vocab_size", static_cast<std::uint32_t>(c.vocab_size));
  m.add_u32(a + "context_length", static_cast<std::uint32_t>(c.max_position_embeddings));
  m.add_u32(a + "embedding_length", static_cast<std::uint32_t>(c.hidden_size));
  m.add_u32(a + "block_count", static_cast<std::uint32_t>(c.num_layers));
  m.add_u32(a + "feed_forward_length", static_cast<std::uint32_t>(c.intermediate_size));
  m.add_u32(a + "attention.head_count", static_cast<std::uint32_t>(c.num_heads));
  const bool mla_split = c.mla && o.gguf_split_kv_b;
  m.add_u32(a + "attention.head_count_kv",
            static_cast<std::uint32_t>(mla_split ? 1 : c.num_kv_heads));
  m.add_u32(a + "attention.key_length",
            static_cast<std::uint32_t>(mla_split ? c.mla->kv_lora_rank + c.mla->qk_rope_head_dim
                                                 : c.head_dim));
  m.add_u32(a + "attention.value_length", static_cast<std::uint32_t>(mla_split ? c.mla->kv_lora_rank
                                                                     : c.mla   ? c.mla->v_head_dim
                                                                               : c.head_dim));
  m.add_u32(a + "rope.dimension_count",
            static_cast<std::uint32_t>(c.mla ? c.mla->qk_rope_head_dim : c.head_dim));
  m.add_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  m.add_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  if (c.moe) {
    m.add_u32(a + "expert_count", static_cast<std::uint32_t>(c.moe->num_experts));
    m.add_u32(a + "expert_used_count", static_cast<std::uint32_t>(c.moe->top_k));
    m.add_u32(a + "expert_feed_forward_length",
              static_cast<std::uint32_t>(c.moe->expert_intermediate));
  }
  if (c.mla) {  // llama.cpp's deepseek2 keys (per-head sizes, as its converter wrote them)
    const MlaConfig &x = *c.mla;
    const MoeConfig &mo = *c.moe;
    if (o.gguf_split_kv_b) {  // its MLA converter: one latent "head", the sizes in *_mla
      m.add_u32(a + "attention.key_length_mla", static_cast<std::uint32_t>(x.qk_head_dim()));
      m.add_u32(a + "attention.value_length_mla", static_cast<std::uint32_t>(x.v_head_dim));
    }
    if (x.q_lora_rank > 0)
      m.add_u32(a + "attention.q_lora_rank", static_cast<std::uint32_t>(x.q_lora_rank));
    m.add_u32(a + "attention.kv_lora_rank", static_cast<std::uint32_t>(x.kv_lora_rank));
    std::int64_t dense = 0;
    while (dense < c.num_layers && !mo.sparse(dense)) ++dense;
    m.add_u32(a + "leading_dense_block_count", static_cast<std::uint32_t>(dense));
    m.add_u32(a + "expert_shared_count",
              static_cast<std::uint32_t>(mo.shared_intermediate / mo.expert_intermediate));
    m.add_f32(a + "expert_weights_scale", static_cast<float>(mo.routed_scaling_factor));
    m.add_bool(a + "expert_weights_norm", mo.norm_topk_prob);
    m.add_u32(a + "expert_gating_func", 2);  // sigmoid
    m.add_u32(a + "expert_group_count", static_cast<std::uint32_t>(mo.n_group));
    m.add_u32(a + "expert_group_used_count", static_cast<std::uint32_t>(mo.topk_group));
    if (c.rope_scaling.mscale_all_dim)
      m.add_f32(a + "rope.scaling.yarn_log_multiplier",
                static_cast<float>(0.1 * *c.rope_scaling.mscale_all_dim));
  }
  if (c.sliding_window)
    m.add_u32(a + "attention.sliding_window", static_cast<std::uint32_t>(*c.sliding_window));
  if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    m.add_string(a + "rope.scaling.type", "yarn");
    m.add_f32(a + "rope.scaling.factor", static_cast<float>(c.rope_scaling.factor));
    m.add_u32(a + "rope.scaling.original_context_length",
              static_cast<std::uint32_t>(c.rope_scaling.original_max_position));
  }
  tok.add_to_gguf(m, c.vocab_size);
  return m;
}

// Fills `rows` rows of tensor t starting at row0 as f32 (HF order, then permuted).
void generate_rows(const PlannedTensor &t, std::uint64_t tensor_seed, std::int64_t row0,
                   std::int64_t rows, std::int64_t cols, std::int64_t total_rows, float *out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float *dst = out + r * cols;
    if (t.init == Init::kOnes) {
      std::fill(dst, dst + cols, 1.0f);
      continue;
    }
    std::int64_t src_row = row0 + r;
    std::int64_t col0 = 0;
    if (t.permute_heads > 0) {
      if (t.spec.shape.size() == 1) {  // a bias: permute its elements
        for (std::int64_t c = 0; c < cols; ++c)
          dst[c] =
              t.std * random_normal(tensor_seed, static_cast<std::uint64_t>(permuted_source_row(
                                                     c, cols, t.permute_heads)));
        continue;
      }
      src_row = permuted_source_row(src_row, total_rows, t.permute_heads);
    }
    const std::uint64_t base = static_cast<std::uint64_t>(src_row * cols + col0);
    for (std::int64_t c = 0; c < cols; ++c) dst[c] = t.std * random_normal(tensor_seed, base + c);
  }
}

}  // namespace

MakeModelReport make_model(const MakeModelOptions &o) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  if (o.out.empty()) throw Error(ErrorCode::kInvalidArgument, "--out is required");
  if (!o.gguf && dtype_is_quantized(o.dtype) && o.dtype != DType::kMXFP4)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(dtype_name(o.dtype)) + " needs --format gguf");
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16 &&
      o.dtype != DType::kQ8_0 && o.dtype != DType::kQ4_0 && o.dtype != DType::kQ4_K &&
      o.dtype != DType::kQ5_K && o.dtype != DType::kQ6_K && o.dtype != DType::kMXFP4 &&
      o.dtype != DType::kF8_E4M3)
    throw Error(ErrorCode::kInvalidArgument,
                "--dtype: expected f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4 or fp8");
  const bool fp8 = o.dtype == DType::kF8_E4M3;
  if (fp8 && o.gguf)
    throw Error(ErrorCode::kInvalidArgument,
                "fp8 is written as safetensors only (GGUF has no FP8)");
  if (fp8 && o.fp8_scale != "block" && o.fp8_scale != "channel" && o.fp8_scale != "tensor")
    throw Error(ErrorCode::kInvalidArgument,
                "--fp8-scale: expected block, channel or tensor, got " + o.fp8_scale);
  if (o.k_quant_mix && o.dtype != DType::kQ4_K && o.dtype != DType::kQ5_K)
    throw Error(ErrorCode::kInvalidArgument, "the Q4_K_M / Q5_K_M mix needs --dtype q4_k or q5_k");

  ModelConfig c = make_model_config(o);
  if (!o.gguf && o.dtype == DType::kMXFP4 && !c.moe)
    throw Error(ErrorCode::kInvalidArgument,
                "mxfp4 in safetensors is gpt-oss's form for MoE experts: use --format gguf for a "
                "dense model");
  if (fp8 && c.arch == Arch::kGptOss)
    throw Error(ErrorCode::kInvalidArgument,
                "fp8: gpt_oss is written in bf16, f32 or mxfp4 (its released form)");
  if (o.gguf && c.moe && c.arch != Arch::kQwen3Moe && c.arch != Arch::kGptOss &&
      c.arch != Arch::kDeepseekV3)
    throw Error(ErrorCode::kInvalidArgument,
                "--format gguf: of the mixture-of-experts models only qwen3_moe, gpt_oss and "
                "deepseek_v3 (llama.cpp's deepseek2) are written as GGUF");
  ModelTokenizer tok =
      o.tokenizer.empty() ? generate_tokenizer(c.vocab_size) : load_tokenizer(o.tokenizer);
  // Qwen3 checkpoints ship their family's ChatML template, which opens a <think> block
  // for the answer unless enable_thinking is false: write it (the core of Qwen3's own),
  // so that reasoning handling can be tried on a made model.
  if (c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe)
    tok.set_chat_template(kQwen3ChatTemplate);
  if (tok.size > c.vocab_size) c.vocab_size = tok.size;  // the embedding must cover every token id
  c.bos_token_id = tok.bos;
  c.eos_token_ids = tok.eos;
  c.torch_dtype = torch_dtype_name(o.dtype);
  if (o.gguf && c.arch == Arch::kLlama) c.rope_style = RopeStyle::kInterleaved;

  std::vector<PlannedTensor> plan = plan_tensors(c, o.dtype, o.gguf, o.k_quant_mix);
  if (fp8) plan = plan_fp8(std::move(plan), c, o.fp8_scale);
  // llama.cpp's MLA files: each kv_b_proj written as attn_k_b [H, kv_lora, nope] and
  // attn_v_b [H, v, kv_lora] (its converter's split), from the same random values.
  std::vector<PlannedTensor> split_kv_b;
  if (o.gguf && c.mla && o.gguf_split_kv_b) {
    if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16)
      throw Error(ErrorCode::kInvalidArgument, "the split kv_b is written in f32, f16 or bf16");
    for (std::size_t i = 0; i < plan.size();) {
      if (plan[i].hf_name.ends_with("self_attn.kv_b_proj.weight")) {
        split_kv_b.push_back(std::move(plan[i]));
        plan.erase(plan.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  std::vector<TensorSpec> specs;
  for (const auto &t : plan) specs.push_back(t.spec);
  const std::size_t split_first = specs.size();
  for (const auto &t : split_kv_b) {
    const std::string blk = t.spec.name.substr(0, t.spec.name.rfind("attn_kv_b.weight"));
    const MlaConfig &m = *c.mla;
    specs.push_back(
        {blk + "attn_k_b.weight", o.dtype, {c.num_heads, m.kv_lora_rank, m.qk_nope_head_dim}});
    specs.push_back(
        {blk + "attn_v_b.weight", o.dtype, {c.num_heads, m.v_head_dim, m.kv_lora_rank}});
  }
  std::vector<float> rope_factors;
  if (o.gguf && c.arch == Arch::kLlama && c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    rope_factors = llama3_rope_factors(c);
    specs.push_back(
        {"rope_freqs.weight", DType::kF32, {static_cast<std::int64_t>(rope_factors.size())}});
  }

  MakeModelReport report;
  report.config = c;
  std::unique_ptr<SafetensorsWriter> st;
  std::unique_ptr<GgufWriter> gg;
  if (o.gguf) {
    fs::path file = o.out;
    if (fs::is_directory(file)) file /= "model.gguf";
    if (file.has_parent_path()) fs::create_directories(file.parent_path());
    report.weights = file;
    gg = std::make_unique<GgufWriter>(file, gguf_metadata(c, o, tok), specs);
    for (std::size_t i = 0; i < split_kv_b.size(); ++i) {
      const PlannedTensor &t = split_kv_b[i];
      const MlaConfig &m = *c.mla;
      const std::int64_t H = c.num_heads, R = m.kv_lora_rank, nope = m.qk_nope_head_dim,
                         vd = m.v_head_dim, rows = H * (nope + vd);
      std::vector<float> kv(static_cast<std::size_t>(rows * R)), k, v;
      generate_rows(t, hash_name(o.seed, t.hf_name), 0, rows, R, rows, kv.data());
      for (std::int64_t h = 0; h < H; ++h) {
        const float *src = kv.data() + h * (nope + vd) * R;
        for (std::int64_t j = 0; j < R; ++j)  // k_b[h] = kv_b's nope rows of head h, transposed
          for (std::int64_t d = 0; d < nope; ++d) k.push_back(src[d * R + j]);
        v.insert(v.end(), src + nope * R, src + (nope + vd) * R);
      }
      for (int part = 0; part < 2; ++part) {
        const std::vector<float> &f = part ? v : k;
        std::vector<std::byte> bytes(
            static_cast<std::size_t>(dtype_bytes(o.dtype, static_cast<std::int64_t>(f.size()))));
        quantize_row(o.dtype, f.data(), bytes.data(), static_cast<std::int64_t>(f.size()));
        gg->write(split_first + 2 * i + part, 0, bytes);
        report.bytes += bytes.size();
      }
    }
    if (!rope_factors.empty())
      gg->write(specs.size() - 1, 0,
                std::as_bytes(std::span(rope_factors.data(), rope_factors.size())));
  } else {
    fs::create_directories(o.out);
    report.weights = o.out / "model.safetensors";
    st = std::make_unique<SafetensorsWriter>(report.weights, specs);
  }

  // Work units of about a million elements, whole rows; fixed by the shapes alone.
  std::vector<WorkUnit> units;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto &s = plan[i].shape();
    report.bytes += plan[i].spec.nbytes();
    if (plan[i].is_scale) continue;  // written with its weight's rows
    // An MXFP4 pair's scales are written with its blocks.
    if (i > 0 && plan[i - 1].scales_spec == i) continue;
    const std::int64_t rows = s.size() == 1 ? 1 : s[0];
    const std::int64_t cols = s.back();
    std::int64_t per = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / cols);
    if (plan[i].fp8_scale)  // whole scale blocks per unit
      per = std::max<std::int64_t>(kFp8Block, per / kFp8Block * kFp8Block);
    for (std::int64_t r = 0; r < rows; r += per) units.push_back({i, r, std::min(per, rows - r)});
    report.parameters +=
        static_cast<std::uint64_t>(plan[i].scales_spec ? rows * cols : plan[i].spec.numel());
  }

  std::mutex progress_mu;  // on_progress is called one call at a time
  std::uint64_t written = 0;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    std::vector<float> f32, scales;
    std::vector<std::byte> bytes;
    try {
      for (std::size_t u = next++; u < units.size() && !failed; u = next++) {
        const WorkUnit &w = units[u];
        const PlannedTensor &t = plan[w.tensor];
        const auto &s = t.shape();
        const std::int64_t cols = s.back(), total_rows = s.size() == 1 ? 1 : s[0];
        f32.resize(static_cast<std::size_t>(w.rows * cols));
        generate_rows(t, hash_name(o.seed, t.hf_name), w.row0, w.rows, cols, total_rows,
                      f32.data());
        const std::int64_t row_bytes = dtype_bytes(t.gen_dtype(), cols);
        bytes.resize(static_cast<std::size_t>(w.rows * row_bytes));
        if (t.fp8_scale) {
          quantize_fp8_rows(f32.data(), w.rows, cols, t.std, o.fp8_scale,
                            reinterpret_cast<std::uint8_t *>(bytes.data()), scales);
          // Block scales: grid rows row0 / 128 ...; channel: rows row0 ...; tensor: one.
          const std::uint64_t first =
              o.fp8_scale == "block"     ? w.row0 / kFp8Block * ((cols + kFp8Block - 1) / kFp8Block)
              : o.fp8_scale == "channel" ? w.row0
                                         : 0;
          if (o.fp8_scale != "tensor" || w.row0 == 0)
            st->write(*t.fp8_scale, first * 4,
                      std::as_bytes(
                          std::span(scales.data(), o.fp8_scale == "tensor" ? 1 : scales.size())));
        } else {
          for (std::int64_t r = 0; r < w.rows; ++r)
            quantize_row(t.gen_dtype(), f32.data() + r * cols, bytes.data() + r * row_bytes, cols);
          if (t.scales_spec) {  // gpt-oss's MXFP4 pair: nibbles and scales apart
            const std::int64_t nb = w.rows * cols / kMxfp4BlockElems,
                               row_nb = cols / kMxfp4BlockElems;
            std::vector<std::uint8_t> nib(static_cast<std::size_t>(nb * 16)),
                sc(static_cast<std::size_t>(nb));
            unpack_gpt_oss_mxfp4(bytes.data(), nib.data(), sc.data(), nb);
            st->write(w.tensor, static_cast<std::uint64_t>(w.row0 * row_nb * 16),
                      std::as_bytes(std::span(nib)));
            st->write(*t.scales_spec, static_cast<std::uint64_t>(w.row0 * row_nb),
                      std::as_bytes(std::span(sc)));
            continue;
          }
        }
        const std::uint64_t off = static_cast<std::uint64_t>(w.row0 * row_bytes);
        if (gg)
          gg->write(w.tensor, off, bytes);
        else
          st->write(w.tensor, off, bytes);
        if (o.on_progress) {
          std::lock_guard lock(progress_mu);
          written += bytes.size();
          o.on_progress(std::min(written, report.bytes), report.bytes);
        }
      }
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  const int n_threads = o.threads > 0
                            ? o.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto &t : pool) t.join();
  if (error) std::rethrow_exception(error);

  if (gg) {
    gg->commit();
  } else {
    st->commit();
    auto write = [&](const char *name, const std::string &text) {
      std::ofstream out(o.out / name, std::ios::binary);
      out << text;
      if (!out) throw Error(ErrorCode::kInternal, (o.out / name).string() + ": write failed");
    };
    write("config.json", hf_config_json(c, o.dtype, o.fp8_scale));
    write("generation_config.json", generation_config_json(c));
    tok.write_hf(o.out);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace keel
