// Deterministic random-weight models of a given shape, written as an HF directory
// (safetensors) or a single GGUF file, for tests and benchmarks (`keel make-model`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "formats/model_config.h"

namespace keel {

struct MakeModelOptions {
  // llama | qwen2 | qwen3 | qwen3_moe | mixtral | glm4_moe | gpt_oss
  std::string arch = "llama";
  // tiny | 100m | 1b | 8b (dense); tiny | small | qwen3-30b-a3b (qwen3_moe);
  // tiny | mixtral-8x7b (mixtral); tiny | small | glm-4.5-air (glm4_moe);
  // tiny | small | gpt-oss-20b | gpt-oss-120b (gpt_oss, in the released layout: fused
  // interleaved experts, MXFP4 as _blocks / _scales pairs)
  std::string shape = "tiny";
  // Explicit dimensions override the shape's.
  std::optional<std::int64_t> hidden, intermediate, layers, heads, kv_heads, head_dim, vocab;
  // Mixture-of-experts overrides: experts, experts per token, one expert's MLP width.
  std::optional<std::int64_t> experts, experts_per_tok, moe_intermediate;
  // glm4_moe or deepseek_v3 safetensors: multi-token-prediction layers written after the
  // decoder layers (num_nextn_predict_layers; the drafter of `--speculative mtp`).
  std::int64_t mtp_layers = 0;
  // deepseek_v3: the q latent's rank (overrides the shape); 0 for a plain q_proj, as
  // DeepSeek-V2-Lite's q_lora_rank: null.
  std::optional<std::int64_t> q_lora_rank;
  std::optional<bool> tie;
  // f32 | f16 | bf16 (both formats), q8_0 | q4_0 | q4_k | q5_k | q6_k (GGUF), mxfp4 (GGUF: linear
  // weights; safetensors: MoE experts only, as gpt-oss's _blocks / _scales pairs), f8_e4m3
  // (safetensors). GGUF MoE: qwen3_moe only (llama.cpp's stacked experts).
  DType dtype = DType::kBF16;
  // FP8: the linear weights in e4m3 with scales (embeddings, norms, lm_head and routers stay
  // bf16, as the FP8 releases ship them): "block" (128 x 128 <w>_scale_inv, the releases of
  // Qwen3 / DeepSeek / GLM), "channel" or "tensor" (<w>_scale, as llm-compressor writes).
  std::string fp8_scale = "block";
  // With q4_k / q5_k: llama.cpp's Q4_K_M / Q5_K_M mix (v_proj and down_proj of the first
  // and last eighth of the layers and every third between, and lm_head, in Q6_K).
  bool k_quant_mix = false;
  bool gguf = false;  // false: HF directory with model.safetensors
  // GGUF deepseek_v3: kv_b_proj as attn_k_b / attn_v_b, as llama.cpp's MLA converter
  // writes it (f32 / f16 / bf16), else one attn_kv_b.
  bool gguf_split_kv_b = false;
  std::filesystem::path tokenizer;  // empty: generate a minimal one
  std::uint64_t seed = 0;
  std::filesystem::path out;  // the directory (safetensors) or the .gguf file
  int threads = 0;            // 0: all cores; the bytes do not depend on it
  // Called (serially, from the writing threads) as tensor bytes are written: done of total.
  std::function<void(std::uint64_t done, std::uint64_t total)> on_progress;
};

// The config a make_model call will write (shape presets plus overrides). Throws
// Error(kInvalidArgument) on an unknown arch or shape or inconsistent dimensions.
ModelConfig make_model_config(const MakeModelOptions &options);

struct MakeModelReport {
  ModelConfig config;
  std::uint64_t parameters = 0;
  std::uint64_t bytes = 0;        // tensor bytes written
  std::filesystem::path weights;  // model.safetensors or the .gguf
  double seconds = 0;
};

// Writes the model; streams tensors to disk from `threads` workers, holding only a
// chunk per worker in memory. Returns what it wrote.
MakeModelReport make_model(const MakeModelOptions &options);

// Element i of a tensor whose stream is `tensor_seed`: approximately N(0, 1), a pure
// function of its arguments (so chunking and thread count cannot change the bytes).
float random_normal(std::uint64_t tensor_seed, std::uint64_t i);

}  // namespace keel
