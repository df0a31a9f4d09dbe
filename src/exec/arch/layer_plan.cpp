#include "exec/arch/layer_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace keel::arch {

const char *layer_step_name(LayerStep step) {
  switch (step) {
    case LayerStep::kInputNorm:
      return "input_norm";
    case LayerStep::kQkvProj:
      return "qkv_proj";
    case LayerStep::kQkvBias:
      return "qkv_bias";
    case LayerStep::kQkNorm:
      return "qk_norm";
    case LayerStep::kRope:
      return "rope";
    case LayerStep::kKvWrite:
      return "kv_write";
    case LayerStep::kAttention:
      return "attention";
    case LayerStep::kOProj:
      return "o_proj";
    case LayerStep::kOBias:
      return "o_bias";
    case LayerStep::kResidualAdd:
      return "residual_add";
    case LayerStep::kPostNorm:
      return "post_norm";
    case LayerStep::kGateUpProj:
      return "gate_up_proj";
    case LayerStep::kSwiglu:
      return "swiglu";
    case LayerStep::kDownProj:
      return "down_proj";
    case LayerStep::kMoeFfn:
      return "moe_ffn";
  }
  return "?";
}

bool LayerPlan::has(LayerStep s) const {
  return std::find(steps.begin(), steps.end(), s) != steps.end();
}

LayerPlan layer_plan(const ModelConfig &c, std::int64_t layer) {
  if (layer < 0 || layer >= c.num_layers)
    throw Error(ErrorCode::kInvalidArgument, "layer plan: layer " + std::to_string(layer) +
                                                 " outside the model's " +
                                                 std::to_string(c.num_layers));
  using S = LayerStep;
  switch (c.arch) {
    case Arch::kLlama:
    case Arch::kMistral:
    case Arch::kQwen2:
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
    case Arch::kMixtral:
    case Arch::kGlm4Moe:
    case Arch::kGptOss: {
      // The Llama family: pre-norm attention then a SwiGLU MLP, each adding into the
      // residual stream. Qwen2 adds q/k/v biases, Qwen3 a per-head q/k norm (the config
      // flags say so, whatever the architecture's name). Qwen3-MoE, Mixtral and GLM-4.5
      // put a mixture of experts in place of the MLP in their sparse layers.
      LayerPlan p;
      p.steps = {S::kInputNorm, S::kQkvProj};
      if (c.attention_bias) p.steps.push_back(S::kQkvBias);
      if (c.qk_norm) p.steps.push_back(S::kQkNorm);
      p.steps.insert(p.steps.end(), {S::kRope, S::kKvWrite, S::kAttention, S::kOProj});
      if (c.attention_out_bias) p.steps.push_back(S::kOBias);
      p.steps.insert(p.steps.end(), {S::kResidualAdd, S::kPostNorm});
      if (c.moe && c.moe->sparse(layer))
        p.steps.push_back(S::kMoeFfn);
      else
        p.steps.insert(p.steps.end(), {S::kGateUpProj, S::kSwiglu, S::kDownProj});
      p.steps.push_back(S::kResidualAdd);
      return p;
    }
    case Arch::kDeepseekV3:
    case Arch::kGlmMoeDsa:
      // Multi-head latent attention has its own forward on the CPU (exec/arch/mla.h);
      // no backend walks a step list for it yet, so CUDA refuses it here by name.
      throw Error(ErrorCode::kUnsupported,
                  std::string(arch_name(c.arch)) +
                      ": multi-head latent attention runs on the CPU backend only (no CUDA "
                      "kernels for it yet)");
  }
  throw Error(ErrorCode::kUnsupported,
              std::string("layer plan: no layer sequence for architecture ") + arch_name(c.arch));
}

}  // namespace keel::arch
