// keel make-model: a deterministic random-weight model for tests and benchmarks.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/progress_bar.h"
#include "formats/make_eagle3_head.h"
#include "formats/make_model.h"

namespace keel::cli {

namespace {

DType parse_dtype(const std::string &s) {
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  if (s == "q8_0") return DType::kQ8_0;
  if (s == "q4_0") return DType::kQ4_0;
  if (s == "q4_k" || s == "q4_k_m") return DType::kQ4_K;
  if (s == "q5_k" || s == "q5_k_m") return DType::kQ5_K;
  if (s == "q6_k") return DType::kQ6_K;
  if (s == "mxfp4") return DType::kMXFP4;
  if (s == "fp8" || s == "f8_e4m3") return DType::kF8_E4M3;
  throw Error(
      ErrorCode::kInvalidArgument,
      "--dtype: expected f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m, q5_k, q5_k_m, q6_k, mxfp4 "
      "or fp8, got " +
          s);
}

}  // namespace

int cmd_make_model(int argc, char **argv) {
  CLI::App app{"Write a deterministic random-weight model (HF safetensors directory or GGUF file)",
               "keel make-model"};
  MakeModelOptions o;
  std::string dtype = "bf16", format = "safetensors", out, tokenizer;
  std::int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0,
               vocab = 0;
  bool tie = false, no_tie = false;
  app.add_option("--arch", o.arch,
                 "llama | qwen2 | qwen3 | qwen3_moe | mixtral | glm4_moe | gpt_oss | deepseek_v3 | "
                 "glm_moe_dsa")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "glm4_moe",
                             "gpt_oss", "deepseek_v3", "glm_moe_dsa"}));
  app.add_option("--shape", o.shape,
                 "tiny | 100m | 1b (Llama 3.2 1B) | 8b (Llama 3.1 8B); MoE: tiny | small | "
                 "qwen3-30b-a3b | mixtral-8x7b | glm-4.5-air | gpt-oss-20b | gpt-oss-120b | "
                 "deepseek-v3 (671B) | glm-5 (744B; --layers for fewer)")
      ->check(
          CLI::IsMember({"tiny", "100m", "1b", "8b", "small", "qwen3-30b-a3b", "mixtral-8x7b",
                         "glm-4.5-air", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "glm-5"}));
  std::int64_t experts = 0, experts_per_tok = 0, moe_intermediate = 0;
  app.add_option("--experts", experts, "MoE: experts per layer (overrides the shape)");
  app.add_option("--experts-per-tok", experts_per_tok, "MoE: experts chosen per token");
  app.add_option("--moe-intermediate", moe_intermediate, "MoE: one expert's MLP width");
  app.add_option(
      "--mtp-layers", o.mtp_layers,
      "glm4_moe, deepseek_v3 or glm_moe_dsa (safetensors): multi-token-prediction layers "
      "after the decoder layers, for --speculative mtp (default 0)");
  std::int64_t q_lora_rank = 0;
  app.add_option("--q-lora-rank", q_lora_rank,
                 "deepseek_v3: the q latent's rank (overrides the shape; 0: a plain q_proj)");
  app.add_option("--hidden", hidden, "hidden size (overrides the shape)");
  app.add_option("--intermediate", intermediate, "MLP intermediate size");
  app.add_option("--layers", layers, "number of layers");
  app.add_option("--heads", heads, "attention heads");
  app.add_option("--kv-heads", kv_heads, "key/value heads (GQA; 1 = MQA)");
  app.add_option("--head-dim", head_dim, "head dimension (default hidden / heads)");
  app.add_option("--vocab", vocab, "vocabulary size (raised to cover the tokenizer)");
  app.add_flag("--tie", tie, "tie the output projection to the embedding");
  app.add_flag("--no-tie", no_tie, "separate lm_head");
  app.add_option("--dtype", dtype,
                 "f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | q4_k_m | q5_k | q5_k_m | q6_k | mxfp4 "
                 "(quantized: GGUF "
                 "only; mxfp4 also as MoE experts in safetensors, gpt-oss's form) | fp8 "
                 "(safetensors only: e4m3 linear weights with scales)");
  app.add_option("--fp8-scale", o.fp8_scale,
                 "fp8 scales: block (128 x 128 weight_scale_inv, default) | channel | tensor "
                 "(weight_scale, as llm-compressor writes)")
      ->check(CLI::IsMember({"block", "channel", "tensor"}));
  app.add_option("--format", format, "safetensors | gguf")
      ->check(CLI::IsMember({"safetensors", "gguf"}));
  app.add_option("--tokenizer", tokenizer,
                 "tokenizer.json or HF directory to ship (default: a generated one)");
  app.add_option("--seed", o.seed, "random seed (same seed, same bytes)");
  app.add_option("--threads", o.threads,
                 "worker threads (default: all cores; output does not depend on it)");
  std::string eagle3_for;
  app.add_option("--eagle3-for", eagle3_for,
                 "instead of a model, write a random EAGLE-3 head (for --speculative eagle3:PATH) "
                 "for the HF model directory TARGET (its shapes; f32; --seed applies)");
  app.add_option("--out", out, "output directory (safetensors) or .gguf file")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  if (!eagle3_for.empty()) {
    MakeEagle3Options e;
    e.target = load_hf_config(eagle3_for);
    e.seed = o.seed;
    e.out = out;
    const std::int64_t bytes = make_eagle3_head(e);
    std::printf("wrote %s: an EAGLE-3 head for %s, %.1f MB of tensors\n", out.c_str(),
                eagle3_for.c_str(), static_cast<double>(bytes) / 1e6);
    return 0;
  }
  if (tie && no_tie) throw Error(ErrorCode::kInvalidArgument, "--tie and --no-tie are exclusive");
  auto opt = [&](const char *name, std::int64_t v, std::optional<std::int64_t> &dst) {
    if (app.count(name) == 0) return;
    if (v <= 0) throw Error(ErrorCode::kInvalidArgument, std::string(name) + " must be positive");
    dst = v;
  };
  opt("--hidden", hidden, o.hidden);
  opt("--intermediate", intermediate, o.intermediate);
  opt("--layers", layers, o.layers);
  opt("--heads", heads, o.heads);
  opt("--kv-heads", kv_heads, o.kv_heads);
  opt("--head-dim", head_dim, o.head_dim);
  opt("--vocab", vocab, o.vocab);
  opt("--experts", experts, o.experts);
  opt("--experts-per-tok", experts_per_tok, o.experts_per_tok);
  opt("--moe-intermediate", moe_intermediate, o.moe_intermediate);
  if (app.count("--q-lora-rank")) o.q_lora_rank = q_lora_rank;
  if (tie) o.tie = true;
  if (no_tie) o.tie = false;
  o.dtype = parse_dtype(dtype);
  o.k_quant_mix = dtype == "q4_k_m" || dtype == "q5_k_m";
  o.gguf = format == "gguf";
  o.tokenizer = tokenizer;
  o.out = out;

  // A bar for the shapes that take a while (on a pipe, a line per tenth).
  std::unique_ptr<ProgressBar> bar;
  o.on_progress = [&bar](std::uint64_t done, std::uint64_t total) {
    if (total < (std::uint64_t{256} << 20)) return;
    if (!bar)
      bar = std::make_unique<ProgressBar>(
          stderr, "writing weights", static_cast<std::int64_t>(total), ProgressBar::Unit::kBytes);
    bar->update(static_cast<std::int64_t>(done));
  };
  const MakeModelReport r = make_model(o);
  if (bar) {
    bar->update(static_cast<std::int64_t>(r.bytes));
    bar->finish();
  }
  std::printf("wrote %s: %s, %llu parameters, %s, %.1f MB of tensors in %.2f s\n",
              r.weights.string().c_str(), r.config.arch_name.c_str(),
              static_cast<unsigned long long>(r.parameters), dtype.c_str(),
              static_cast<double>(r.bytes) / 1e6, r.seconds);
  return 0;
}

}  // namespace keel::cli
