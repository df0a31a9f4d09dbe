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
#include <thread>
#include <vector>

#include "core/error.h"
#include "formats/gguf_writer.h"
#include "formats/model_tokenizer.h"
#include "formats/model_weights.h"
#include "formats/quant.h"
#include "formats/safetensors_writer.h"

namespace keel {

namespace {

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
};

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

// The MoE shapes: "tiny" for tests, "small" for CPU benchmarks, and released models.
static void apply_moe_shape(ModelConfig &c, const std::string &shape) {
  MoeConfig m;
  m.norm_topk_prob = true;
  if (c.arch == Arch::kMixtral) m.naming = MoeConfig::Naming::kMixtral;
  c.tie_word_embeddings = false;
  if (shape == "tiny") {
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
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "--arch: expected llama, qwen2, qwen3, qwen3_moe or mixtral, got " + o.arch);
  }
  const bool llama = c.arch == Arch::kLlama;
  c.rms_norm_eps = llama ? 1e-5 : 1e-6;
  c.rope_theta = llama ? 500000.0 : 1000000.0;
  if (c.arch == Arch::kQwen3Moe || c.arch == Arch::kMixtral) {
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
                "--shape: expected tiny, 100m, 1b or 8b, got " + o.shape);
  }
  if (o.hidden) c.hidden_size = *o.hidden;
  if (o.intermediate) c.intermediate_size = *o.intermediate;
  if (o.layers) c.num_layers = *o.layers;
  if (o.heads) c.num_heads = *o.heads;
  if (o.kv_heads) c.num_kv_heads = *o.kv_heads;
  if (o.head_dim) {
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
    if (c.arch == Arch::kMixtral) {
      if (o.intermediate) c.moe->expert_intermediate = *o.intermediate;
      c.intermediate_size = c.moe->expert_intermediate;
    }
    c.moe->sparse_layers.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.num_layers, 0)),
                                true);
  } else if (o.experts || o.experts_per_tok || o.moe_intermediate) {
    throw Error(ErrorCode::kInvalidArgument,
                "--experts, --experts-per-tok and --moe-intermediate need a MoE --arch");
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
    t.spec.shape = std::move(shape);
    t.init = init;
    t.std = std;
    t.permute_heads = gguf && c.arch == Arch::kLlama ? permute : 0;
    out.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, Init::kNormal);
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h}, Init::kOnes);
    add(p + "self_attn.q_proj.weight", {q, h}, Init::kNormal, 0.02f, c.num_heads);
    add(p + "self_attn.k_proj.weight", {kv, h}, Init::kNormal, 0.02f, c.num_kv_heads);
    const std::int64_t n = c.num_layers;
    const bool more_bits = k_quant_mix && (l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2);
    const DType mixed = more_bits ? DType::kQ6_K : DType::kI32;
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
    add(p + "post_attention_layernorm.weight", {h}, Init::kOnes);
    if (c.moe && c.moe->sparse(l)) {
      const MoeConfig &m = *c.moe;
      const std::int64_t I = m.expert_intermediate;
      // A router far from uniform, so that random tokens spread over the experts.
      add(moe_router_name(m, l), {m.num_experts, h}, Init::kNormal, 1.0f);
      for (std::int64_t e = 0; e < m.num_experts; ++e) {
        add(moe_expert_name(m, l, e, ExpertMatrix::kGate), {I, h}, Init::kNormal);
        add(moe_expert_name(m, l, e, ExpertMatrix::kUp), {I, h}, Init::kNormal);
        add(moe_expert_name(m, l, e, ExpertMatrix::kDown), {h, I}, Init::kNormal);
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

std::string hf_config_json(const ModelConfig &c, DType dtype) {
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
    default:
      return 0;
  }
}

GgufMetadata gguf_metadata(const ModelConfig &c, const MakeModelOptions &o,
                           const ModelTokenizer &tok) {
  GgufMetadata m;
  const std::string a = c.arch_name + ".";
  m.add_string("general.architecture", c.arch_name);
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
  m.add_u32(a + "attention.head_count_kv", static_cast<std::uint32_t>(c.num_kv_heads));
  m.add_u32(a + "attention.key_length", static_cast<std::uint32_t>(c.head_dim));
  m.add_u32(a + "attention.value_length", static_cast<std::uint32_t>(c.head_dim));
  m.add_u32(a + "rope.dimension_count", static_cast<std::uint32_t>(c.head_dim));
  m.add_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  m.add_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
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
  if (!o.gguf && dtype_is_quantized(o.dtype))
    throw Error(ErrorCode::kInvalidArgument,
                std::string(dtype_name(o.dtype)) + " needs --format gguf");
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16 &&
      o.dtype != DType::kQ8_0 && o.dtype != DType::kQ4_0 && o.dtype != DType::kQ4_K &&
      o.dtype != DType::kQ5_K && o.dtype != DType::kQ6_K)
    throw Error(ErrorCode::kInvalidArgument,
                "--dtype: expected f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k");
  if (o.k_quant_mix && o.dtype != DType::kQ4_K && o.dtype != DType::kQ5_K)
    throw Error(ErrorCode::kInvalidArgument, "the Q4_K_M / Q5_K_M mix needs --dtype q4_k or q5_k");

  ModelConfig c = make_model_config(o);
  if (o.gguf && c.moe)
    throw Error(ErrorCode::kInvalidArgument,
                "--format gguf: mixture-of-experts models are written as safetensors only");
  ModelTokenizer tok =
      o.tokenizer.empty() ? generate_tokenizer(c.vocab_size) : load_tokenizer(o.tokenizer);
  if (tok.size > c.vocab_size) c.vocab_size = tok.size;  // the embedding must cover every token id
  c.bos_token_id = tok.bos;
  c.eos_token_ids = tok.eos;
  c.torch_dtype = torch_dtype_name(o.dtype);
  if (o.gguf && c.arch == Arch::kLlama) c.rope_style = RopeStyle::kInterleaved;

  std::vector<PlannedTensor> plan = plan_tensors(c, o.dtype, o.gguf, o.k_quant_mix);
  std::vector<TensorSpec> specs;
  for (const auto &t : plan) specs.push_back(t.spec);
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
    const auto &s = plan[i].spec.shape;
    const std::int64_t rows = s.size() == 1 ? 1 : s[0];
    const std::int64_t cols = s.back();
    const std::int64_t per = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / cols);
    for (std::int64_t r = 0; r < rows; r += per) units.push_back({i, r, std::min(per, rows - r)});
    report.parameters += static_cast<std::uint64_t>(plan[i].spec.numel());
    report.bytes += plan[i].spec.nbytes();
  }

  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    std::vector<float> f32;
    std::vector<std::byte> bytes;
    try {
      for (std::size_t u = next++; u < units.size() && !failed; u = next++) {
        const WorkUnit &w = units[u];
        const PlannedTensor &t = plan[w.tensor];
        const auto &s = t.spec.shape;
        const std::int64_t cols = s.back(), total_rows = s.size() == 1 ? 1 : s[0];
        f32.resize(static_cast<std::size_t>(w.rows * cols));
        generate_rows(t, hash_name(o.seed, t.hf_name), w.row0, w.rows, cols, total_rows,
                      f32.data());
        const std::int64_t row_bytes = dtype_bytes(t.spec.dtype, cols);
        bytes.resize(static_cast<std::size_t>(w.rows * row_bytes));
        for (std::int64_t r = 0; r < w.rows; ++r)
          quantize_row(t.spec.dtype, f32.data() + r * cols, bytes.data() + r * row_bytes, cols);
        const std::uint64_t off = static_cast<std::uint64_t>(w.row0 * row_bytes);
        if (gg)
          gg->write(w.tensor, off, bytes);
        else
          st->write(w.tensor, off, bytes);
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
    write("config.json", hf_config_json(c, o.dtype));
    write("generation_config.json", generation_config_json(c));
    tok.write_hf(o.out);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace keel
