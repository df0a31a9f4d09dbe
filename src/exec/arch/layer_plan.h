// One description of each architecture's decoder layer: the ordered steps both backends
// execute (the CPU forward, exec/arch/llama.cpp; the CUDA runner,
// exec/cuda/cuda_runner_layers.cpp). A backend supplies a kernel for each step -- it may
// fuse neighbours, as CUDA folds a residual add into the next norm -- never its own copy
// of the sequence. A new architecture adds its steps here (a mixture-of-experts block:
// a router and the experts) and each backend a kernel for a step it lacks; a backend
// refuses a plan with a step it has no kernel for (Error kUnsupported, naming the step).
// Shapes and per-step parameters (rope style, window, eps) come from the ModelConfig.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/model_config.h"

namespace keel::arch {

enum class LayerStep : std::uint8_t {
  kInputNorm,    // h = rmsnorm(x) * input_layernorm                 [T, hidden]
  kQkvProj,      // q, k, v = h W_q^T, h W_k^T, h W_v^T               [T, (H + 2G) D]
  kQkvBias,      // q, k, v += their projection biases (Qwen2)
  kQkNorm,       // RMSNorm over head_dim of every q and k head (Qwen3)
  kRope,         // rotary position embedding of q and k (config's rope style and scaling)
  kKvWrite,      // this step's k and v into the paged KV cache
  kAttention,    // causal paged attention over the cache (window_of(layer); gpt-oss: sinks)
  kOProj,        // h = att W_o^T (summed over tensor-parallel ranks)   [T, hidden]
  kOBias,        // h += the o_proj bias (Llama with attention_bias), after the rank sum
  kResidualAdd,  // x += h
  kPostNorm,     // h = rmsnorm(x) * post_attention_layernorm
  kGateUpProj,   // gate, up = h W_gate^T, h W_up^T                   [T, I] each
  kSwiglu,       // act = silu(gate) * up
  kDownProj,     // h = act W_down^T (summed over tensor-parallel ranks)
  kMoeFfn,       // h = sum over the router's top-k experts of weight * SwiGLU expert(h)
                 // (exec/arch/moe_ffn.h): replaces gate_up / swiglu / down in a sparse layer
};

const char *layer_step_name(LayerStep step);

struct LayerPlan {
  std::vector<LayerStep> steps;
  bool has(LayerStep s) const;
};

// The steps of decoder layer `layer` of a model of this configuration. Throws
// Error(kUnsupported) for an architecture no plan describes.
LayerPlan layer_plan(const ModelConfig &config, std::int64_t layer);

}  // namespace keel::arch
