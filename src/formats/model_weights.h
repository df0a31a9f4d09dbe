// A model's configuration and weights, from an HF directory (config.json +
// safetensors) or a GGUF file, addressed by HF tensor names. Tensors stay in the
// memory-mapped files; views point into them.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_view.h"
#include "formats/model_config.h"

namespace keel {

class GgufFile;
struct GgufTensorInfo;
class SafetensorsModel;
struct SafetensorsTensor;

class ModelWeights {
 public:
  enum class Format { kSafetensors, kGguf };

  // `path`: an HF model directory, a .gguf file, or a directory holding one .gguf.
  // Checks that every tensor the architecture needs is present with the shape the
  // config implies; throws Error(kFormat / kNotFound / kUnsupported) naming the file
  // and tensor otherwise.
  static std::unique_ptr<ModelWeights> open(const std::filesystem::path &path);

  ~ModelWeights();
  ModelWeights(const ModelWeights &) = delete;
  ModelWeights &operator=(const ModelWeights &) = delete;

  const ModelConfig &config() const { return config_; }
  Format format() const { return format_; }
  const std::filesystem::path &path() const { return path_; }
  // Where the tokenizer lives: the HF directory, or the .gguf file itself.
  const std::filesystem::path &tokenizer_path() const { return tokenizer_path_; }
  // The GGUF file (metadata, tokenizer keys) when format() == kGguf, else null.
  const GgufFile *gguf() const { return gguf_.get(); }

  // By HF name (model.layers.3.self_attn.q_proj.weight, ...). With tied embeddings
  // "lm_head.weight" resolves to the embedding. Null when absent.
  const TensorView *find(std::string_view hf_name) const;
  // As find(), but throws Error(kNotFound) naming the tensor and file when absent, or
  // Error(kUnsupported) when present with a dtype keel cannot use.
  const TensorView &get(std::string_view hf_name) const;
  std::vector<std::string> names() const;
  // How the matrices a forward pass multiplies by are stored: their distinct dtypes, sorted
  // and joined with '+' ("bf16", "q4_k+q6_k", "bf16+fp8"); the embedding, vectors (norms,
  // biases) and FP8 scale grids do not count.
  std::string linear_dtypes() const;
  // Bytes of all tensors (the weights a forward pass streams through).
  std::size_t total_bytes() const;

  // GGUF tensor name -> HF name ("blk.3.attn_q.weight" ->
  // "model.layers.3.self_attn.q_proj.weight"); names without an HF counterpart are returned
  // unchanged.
  static std::string hf_name_from_gguf(std::string_view gguf_name);
  // The inverse, for writers.
  static std::string gguf_name_from_hf(std::string_view hf_name);

 private:
  ModelWeights() = default;
  void check_shapes() const;
  // llama.cpp stacks a layer's experts in one tensor (blk.N.ffn_gate_exps.weight:
  // [E, I, hidden]); registers a view of each expert under its HF name. False when `t`
  // is not such a tensor.
  bool split_stacked_experts(const GgufTensorInfo &t, const std::string &file);
  // llama.cpp's MLA files split kv_b_proj into attn_k_b [H, kv_lora, nope] and attn_v_b
  // [H, v, kv_lora]: joined back here into an f32 kv_b_proj [H (nope + v), kv_lora].
  void join_split_kv_b();
  // transformers 5 keeps experts fused (model.layers.N.mlp.experts.gate_up_proj
  // [E, 2I, hidden], ...down_proj [E, hidden, I]); registers per-expert views likewise.
  bool split_fused_experts(const TensorView &all, const std::string &file);
  // gpt-oss's fused router and experts (formats/gpt_oss_layout.h): registers them under
  // the per-expert names. False when `t` is not one of them.
  bool take_gpt_oss_tensor(const TensorView &t, const std::string &file);
  // gpt-oss's MXFP4 pairs (<name>_blocks, <name>_scales, formats/mxfp4.h): repacked into
  // one MXFP4 tensor named <name>, owned here. Null when `t` is not a _blocks tensor;
  // throws Error(kFormat) naming it when its scales are missing or the shapes disagree.
  // (gpt-oss's own gate_up_proj interleaves gate and up rows, 2i and 2i + 1: a gpt_oss
  // checkpoint's pairs go through take_gpt_oss_tensor, not split_fused_experts.)
  std::optional<TensorView> load_mxfp4_pair(const SafetensorsTensor &t, const std::string &file);
  // Gives every FP8 tensor its scales (<name>_scale_inv or <name>_scale: per tensor, per
  // channel or in blocks, fp8_config.h), converted to f32 and owned here; throws
  // Error(kFormat) naming the tensor when they are missing, mis-shaped or not finite.
  void attach_fp8_scales();

  ModelConfig config_;
  Format format_ = Format::kSafetensors;
  std::filesystem::path path_;
  std::filesystem::path tokenizer_path_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<SafetensorsModel> safetensors_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> unsupported_;  // name -> reason
  std::vector<std::unique_ptr<std::byte[]>> owned_;              // repacked tensors (MXFP4 pairs)
  std::map<std::string, std::vector<float>> fp8_scales_;         // weight name -> f32 scale grid
};

}  // namespace keel
