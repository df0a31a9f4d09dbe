// CudaModelRunner: which device format each linear weight takes (issue #18). Kept apart
// from cuda_model_runner.cpp so the format rules read in one place.
#include <optional>
#include <set>

#include "exec/cuda/cuda_model_runner.h"

namespace keel::cuda {

namespace {
std::string layer_tensor(std::int64_t i, const char *rest) {
  return "model.layers." + std::to_string(i) + "." + rest;
}
}  // namespace

void CudaModelRunner::plan_weight_formats(const WeightSource &weights, QuantizedWeights mode) {
  const auto &c = config_;
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, q = c.num_heads * c.head_dim,
                     kv = c.num_kv_heads * c.head_dim;
  const std::int64_t bf16_linear = 2 * c.num_layers * ((q + 2 * kv) * H + H * q + 3 * I * H) +
                                   (c.tie_word_embeddings ? 0 : 2 * c.vocab_size * H);
  const bool keep_quantized =
      mode == QuantizedWeights::kOn ||
      (mode == QuantizedWeights::kAuto && keep_quantized_auto(bf16_linear, free_at_open_));
  auto plan = [&](std::vector<std::string> names, std::vector<std::int64_t> rows, std::int64_t K) {
    std::vector<std::pair<std::string, DType>> parts;
    std::vector<TensorScale> scales;  // FP8 weights: kept as stored unless mode is kOff
    for (auto &n : names) {
      const TensorView t = weights(n);
      parts.emplace_back(n, t.dtype);
      scales.push_back(t.scale);
    }
    const bool fp8 = parts.front().second == DType::kF8_E4M3;
    return plan_linear(parts, rows, K, fp8 ? mode != QuantizedWeights::kOff : keep_quantized,
                       &scales);
  };
  layers_.resize(c.num_layers);
  expert_format_ = bf16_experts(c);
  ExpertFormat &xf = expert_format_;
  // Routed experts stay MXFP4 when every one of them is MXFP4 in the file (gpt-oss's
  // _blocks / _scales, GGUF type 39): 0.53 bytes a weight against bf16's 2 (gpt-oss-120b
  // fits on one GPU only so). Anything else, or kOff, converts them to bf16 at load.
  if (c.moe && mode != QuantizedWeights::kOff) {
    const MoeConfig &m = *c.moe;
    bool any = false, all = c.hidden_size % 32 == 0 && m.expert_intermediate % 32 == 0;
    for (std::int64_t i = 0; i < c.num_layers && all; ++i) {
      if (!m.sparse(i)) continue;
      any = true;
      for (std::int64_t e = 0; e < m.num_experts && all; ++e)
        for (const ExpertMatrix x : {ExpertMatrix::kGate, ExpertMatrix::kUp, ExpertMatrix::kDown})
          all = all && weights(moe_expert_name(m, i, e, x)).dtype == DType::kMXFP4;
    }
    if (any && all) xf.format = WeightFormat::kMxfp4;
  }
  // FP8 experts stay FP8 on the same terms as FP8 linear weights (scales the device grid
  // holds, K % 16 == 0), with one row block per matrix kind across the experts.
  if (c.moe && mode != QuantizedWeights::kOff && !xf.low_bit()) {
    const MoeConfig &m = *c.moe;
    const std::int64_t H = c.hidden_size, Ie = m.expert_intermediate;
    bool any = false, all = H % 16 == 0 && Ie % 16 == 0;
    auto fits = [&](const TensorView &t, std::int64_t rows, std::int64_t K, std::int64_t &br) {
      const TensorScale &s = t.scale;
      if (t.dtype != DType::kF8_E4M3 || !s.present() || s.block_rows <= 0 ||
          !(s.block_cols >= K || s.block_cols % kFp8ScaleCols == 0) ||
          s.grid_rows != (rows + s.block_rows - 1) / s.block_rows ||
          s.grid_cols * s.block_cols < K || (br != 0 && br != s.block_rows))
        return false;
      br = s.block_rows;
      return true;
    };
    std::int64_t gu_rows = 0, down_rows = 0;
    for (std::int64_t i = 0; i < c.num_layers && all; ++i) {
      if (!m.sparse(i)) continue;
      any = true;
      for (std::int64_t e = 0; e < m.num_experts && all; ++e)
        all = fits(weights(moe_expert_name(m, i, e, ExpertMatrix::kGate)), Ie, H, gu_rows) &&
              fits(weights(moe_expert_name(m, i, e, ExpertMatrix::kUp)), Ie, H, gu_rows) &&
              fits(weights(moe_expert_name(m, i, e, ExpertMatrix::kDown)), H, Ie, down_rows);
    }
    if (any && all) {
      xf.format = WeightFormat::kFp8;
      xf.gate_up_block_rows = gu_rows;
      xf.down_block_rows = down_rows;
    }
  }
  // GGUF K-quant / Q8_0 / Q4_0 experts: one format for every gate and up, one for every
  // down. Like GGUF linear weights, kept under kAuto only when the bf16 form (experts
  // included) would not fit; kOn keeps them always.
  if (c.moe && !xf.low_bit()) {
    const MoeConfig &m = *c.moe;
    const std::int64_t Ie = m.expert_intermediate;
    std::int64_t sparse = 0;
    for (std::int64_t i = 0; i < c.num_layers; ++i) sparse += m.sparse(i) ? 1 : 0;
    const std::int64_t bf16_experts = sparse * m.num_experts * 3 * Ie * H * 2;
    const bool keep = mode == QuantizedWeights::kOn ||
                      (mode == QuantizedWeights::kAuto &&
                       keep_quantized_auto(bf16_linear + bf16_experts, free_at_open_));
    std::optional<QuantFormat> gu, down;
    bool all = keep && sparse > 0;
    auto same = [&](DType t, std::optional<QuantFormat> &f, std::int64_t K) {
      const auto q = device_quant_format(t);
      if (!q || *q == QuantFormat::kMXFP4 || K % quant_block_elems(*q) != 0 || (f && *f != *q))
        return false;
      f = q;
      return true;
    };
    for (std::int64_t i = 0; i < c.num_layers && all; ++i) {
      if (!m.sparse(i)) continue;
      for (std::int64_t e = 0; e < m.num_experts && all; ++e)
        all = same(weights(moe_expert_name(m, i, e, ExpertMatrix::kGate)).dtype, gu, H) &&
              same(weights(moe_expert_name(m, i, e, ExpertMatrix::kUp)).dtype, gu, H) &&
              same(weights(moe_expert_name(m, i, e, ExpertMatrix::kDown)).dtype, down, Ie);
    }
    if (all) {
      xf.format = WeightFormat::kGguf;
      xf.gate_up_blocks = *gu;
      xf.down_blocks = *down;
    }
  }
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    Layer &l = layers_[i];
    if (!c.mla) {  // MLA's projections stay bf16 for now (cuda_runner_mla.cpp)
      l.qkv_fmt = plan(
          {layer_tensor(i, "self_attn.q_proj.weight"), layer_tensor(i, "self_attn.k_proj.weight"),
           layer_tensor(i, "self_attn.v_proj.weight")},
          {q, kv, kv}, H);
      l.o_fmt = plan({layer_tensor(i, "self_attn.o_proj.weight")}, {H}, q);
    }
    if (c.moe && c.moe->sparse(i)) continue;  // experts: expert_format_
    l.gate_up_fmt =
        plan({layer_tensor(i, "mlp.gate_proj.weight"), layer_tensor(i, "mlp.up_proj.weight")},
             {I, I}, H);
    l.down_fmt = plan({layer_tensor(i, "mlp.down_proj.weight")}, {H}, I);
  }
  if (fed_.head)
    lm_head_fmt_ = fed_.head_fmt;  // borrowed: laid out as its owner planned it
  else if (!c.tie_word_embeddings)
    lm_head_fmt_ = plan({"lm_head.weight"}, {c.vocab_size}, H);
}

std::string CudaModelRunner::weight_format() const {
  std::set<std::string> seen;
  auto add = [&](const LinearLayout &l) {
    const std::string d = l.describe();
    std::size_t at = 0;
    while (at <= d.size()) {
      const std::size_t plus = d.find('+', at);
      seen.insert(d.substr(at, plus == std::string::npos ? std::string::npos : plus - at));
      if (plus == std::string::npos) break;
      at = plus + 1;
    }
  };
  for (const auto &l : layers_) {
    add(l.qkv_fmt);
    add(l.o_fmt);
    add(l.gate_up_fmt);
    add(l.down_fmt);
  }
  add(lm_head_fmt_);
  if (expert_format_.low_bit()) {
    seen.insert(expert_format_.name(ExpertMatrix::kGate));
    seen.insert(expert_format_.name(ExpertMatrix::kDown));
  }
  std::string out;
  for (const auto &s : seen) out += (out.empty() ? "" : "+") + s;
  return out;
}

}  // namespace keel::cuda
