// The shape and hyper-parameters of a Llama-family model, from HF config.json (+
// generation_config.json) or from GGUF metadata.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/ids.h"
#include "formats/fp8_config.h"
#include "formats/mla_config.h"
#include "formats/moe_config.h"

namespace keel {

class GgufFile;

enum class Arch {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kQwen3Moe,
  kMixtral,
  kGlm4Moe,
  kGptOss,
  kDeepseekV3,  // DeepSeek-V3 / R1, Kimi K2: MLA + grouped sigmoid MoE
  kGlmMoeDsa,   // GLM-5: MLA + the DSA indexer + grouped sigmoid MoE
};

// What a token leaves in the KV cache per layer (ARCHITECTURE, "Seams for the open work"):
// kSplit: K and V rows of num_kv_heads x head_dim each; kLatent (MLA): one row of
// kv_lora_rank + qk_rope_head_dim values (+ index_head_dim of the DSA indexer's key), no V.
enum class KvLayout { kSplit, kLatent };

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kYarn } type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  std::int64_t original_max_position = 8192;  // llama3, yarn
  double beta_fast = 32.0;                    // yarn
  double beta_slow = 1.0;                     // yarn
  std::optional<double> attention_factor;     // yarn mscale override
  // DeepSeek's yarn: with both, attention_factor = mscale(factor, mscale) /
  // mscale(factor, mscale_all_dim), and MLA's softmax scale gains mscale_all_dim's square.
  std::optional<double> mscale, mscale_all_dim;
  bool truncate = true;  // yarn: round the correction range to whole dims (gpt-oss: false)
};

// HF's rotate_half pairs (i, i + d/2); GGUF llama-type files permute q/k rows so that
// pairs are adjacent (2i, 2i + 1). The forward pass honours either.
enum class RopeStyle { kNeox, kInterleaved };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;  // as the file spells it ("llama", "qwen2", ...)
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;  // explicit (qwen3) or hidden_size / num_heads
  std::int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::kNeox;
  // The share of head_dim that rotates (GLM-4.5: 0.5); the rest passes through.
  double partial_rotary_factor = 1.0;
  bool attention_bias = false;      // q/k/v projections have biases (qwen2)
  bool qk_norm = false;             // per-head RMSNorm on q and k (qwen3)
  bool attention_out_bias = false;  // o_proj has a bias too (llama with attention_bias)
  bool tie_word_embeddings = false;
  std::optional<std::int64_t> sliding_window;
  // Per layer: true where the layer attends within sliding_window (HF layer_types
  // "sliding_attention"; gpt-oss alternates). Empty: every layer uses sliding_window
  // when it is set. Backends ask window_of(), never sliding_window directly.
  std::vector<bool> sliding_layers;
  // gpt-oss: one learned logit per query head (model.layers.L.self_attn.sinks, [num_heads])
  // that joins the softmax denominator of every query of that head (exp(sink - max)
  // added to the sum) but has no value row.
  bool attention_sinks = false;
  std::optional<TokenId> bos_token_id;
  std::vector<TokenId> eos_token_ids;  // config and generation_config, merged
  std::string torch_dtype;             // as saved ("bfloat16", ...), informational
  // GGUF llama files bake llama3 rope scaling into a tensor (rope_freqs.weight,
  // [head_dim / 2] f32): pair i's frequency is divided by rope_freq_factors[i]. Empty
  // when absent; then rope_scaling says what to do.
  std::vector<float> rope_freq_factors;
  // Mixture of experts (qwen3_moe, mixtral, glm4_moe); absent for dense models.
  std::optional<MoeConfig> moe;
  // FP8 e4m3 linear weights with their scales (quantization_config); absent otherwise.
  std::optional<Fp8Config> fp8;
  // Multi-head latent attention (deepseek_v3, glm_moe_dsa); absent otherwise. With it,
  // num_kv_heads == num_heads and head_dim == qk_nope_head_dim + qk_rope_head_dim.
  std::optional<MlaConfig> mla;
  KvLayout kv_layout = KvLayout::kSplit;

  // The window layer `layer` attends within, or nullopt for full attention.
  std::optional<std::int64_t> window_of(std::int64_t layer) const {
    if (!sliding_window || sliding_layers.empty()) return sliding_window;
    if (layer < 0 || layer >= static_cast<std::int64_t>(sliding_layers.size())) return std::nullopt;
    return sliding_layers[static_cast<std::size_t>(layer)] ? sliding_window : std::nullopt;
  }
};

// Values one token leaves in the KV cache for one layer: 2 x num_kv_heads x head_dim for
// kSplit, MlaConfig::latent_values() for kLatent (DeepSeek-V3: 576; GLM-5: 704). The memory
// plan, the runners, make-model and /api/status all size the cache by it.
std::int64_t kv_values_per_token_layer(const ModelConfig &config);

// Reads config.json (and generation_config.json when present) of an HF model directory.
// Throws Error(kFormat) naming the file and field on missing or inconsistent values.
ModelConfig load_hf_config(const std::filesystem::path &model_dir);
// Parses the text of a config.json; `origin` names it in errors.
ModelConfig parse_hf_config(const std::string &config_json, const std::string &origin);
// Reads the {arch}.* keys of a GGUF file.
ModelConfig config_from_gguf(const GgufFile &gguf);

// "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "glm4_moe", "gpt_oss",
// "deepseek_v3", "glm_moe_dsa".
const char *arch_name(Arch arch);
// Checks dimensions (positive, heads divisible by kv heads, ...); throws Error(kFormat)
// naming `origin` and the field.
void validate_config(const ModelConfig &config, const std::string &origin);

}  // namespace keel
