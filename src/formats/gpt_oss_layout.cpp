#include "formats/gpt_oss_layout.h"

#include <charconv>
#include <cstring>
#include <string_view>

#include "core/error.h"

namespace keel {

namespace {

std::string shape_str(const std::vector<std::int64_t> &s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// "model.layers.<N>.<rest>" -> N, rest.
bool split_layer(std::string_view name, std::int64_t &layer, std::string_view &rest) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return false;
  name.remove_prefix(kPrefix.size());
  const auto dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || p != name.data() + dot) return false;
  rest = name.substr(dot + 1);
  return true;
}

class Splitter {
 public:
  Splitter(const TensorView &t, const ModelConfig &c, const std::string &file)
      : t_(t), c_(c), m_(*c.moe), origin_(file + ": " + t.name) {}

  void expect_shape(const std::vector<std::int64_t> &shape, const char *what) const {
    if (t_.shape != shape)
      throw Error(ErrorCode::kFormat, origin_ + ": shape " + shape_str(t_.shape) + ", expected " +
                                          shape_str(shape) + " " + what);
  }
  void expect_plain() const {
    if (t_.dtype != DType::kF32 && t_.dtype != DType::kBF16 && t_.dtype != DType::kF16)
      throw Error(ErrorCode::kUnsupported, origin_ + ": dtype " +
                                               std::string(dtype_name(t_.dtype)) +
                                               " (gpt-oss experts are read as bf16, f32, f16 or "
                                               "MXFP4 _blocks / _scales)");
  }

  // A view of `t_` renamed, or of part of it.
  void view(std::string name, std::vector<std::int64_t> shape, std::size_t offset) {
    TensorView v = t_;
    v.name = std::move(name);
    v.shape = std::move(shape);
    v.data = t_.data + offset;
    v.nbytes = static_cast<std::size_t>(dtype_bytes(t_.dtype, v.numel()));
    out_.views.push_back(std::move(v));
  }
  // A new tensor of `t_`'s dtype and this shape; fill(dst) writes every byte.
  template <class Fill>
  void copy(std::string name, std::vector<std::int64_t> shape, Fill fill) {
    TensorView v = t_;
    v.name = std::move(name);
    v.shape = std::move(shape);
    v.nbytes = static_cast<std::size_t>(dtype_bytes(t_.dtype, v.numel()));
    out_.owned.emplace_back(new std::byte[v.nbytes]);
    fill(out_.owned.back().get());
    v.data = out_.owned.back().get();
    out_.views.push_back(std::move(v));
  }

  std::optional<GptOssTensors> run() {
    std::int64_t layer = 0;
    std::string_view rest;
    if (!split_layer(t_.name, layer, rest)) return std::nullopt;
    if (layer < 0 || layer >= c_.num_layers) return std::nullopt;
    const std::int64_t E = m_.num_experts, I = m_.expert_intermediate, H = c_.hidden_size;
    const bool mx = t_.dtype == DType::kMXFP4;
    if (rest == "mlp.router.weight") {
      expect_shape({E, H}, "(num_local_experts, hidden_size)");
      view(moe_router_name(m_, layer), {E, H}, 0);
    } else if (rest == "mlp.router.bias") {
      expect_shape({E}, "(num_local_experts)");
      view(moe_router_logit_bias_name(m_, layer), {E}, 0);
    } else if (rest == "mlp.experts.gate_up_proj") {
      if (mx) {
        expect_shape({E, 2 * I, H}, "(experts, 2 x intermediate_size, hidden_size)");
        gate_up_rows(layer, E, I, H);
      } else {
        expect_plain();
        expect_shape({E, H, 2 * I}, "(experts, hidden_size, 2 x intermediate_size)");
        gate_up_columns(layer, E, I, H);
      }
    } else if (rest == "mlp.experts.gate_up_proj_bias") {
      expect_plain();
      expect_shape({E, 2 * I}, "(experts, 2 x intermediate_size)");
      const std::size_t es = static_cast<std::size_t>(dtype_bytes(t_.dtype, 1));
      for (std::int64_t e = 0; e < E; ++e)
        for (int j = 0; j < 2; ++j)
          copy(moe_expert_bias_name(m_, layer, e, j == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp),
               {I}, [&](std::byte *dst) {
                 const std::byte *src = t_.data + (e * 2 * I + j) * es;
                 for (std::int64_t i = 0; i < I; ++i)
                   std::memcpy(dst + i * es, src + 2 * i * es, es);
               });
    } else if (rest == "mlp.experts.down_proj") {
      if (mx) {
        expect_shape({E, H, I}, "(experts, hidden_size, intermediate_size)");
        const std::size_t per = static_cast<std::size_t>(dtype_bytes(t_.dtype, H * I));
        for (std::int64_t e = 0; e < E; ++e)
          view(moe_expert_name(m_, layer, e, ExpertMatrix::kDown), {H, I}, e * per);
      } else {
        expect_plain();
        expect_shape({E, I, H}, "(experts, intermediate_size, hidden_size)");
        const std::size_t es = static_cast<std::size_t>(dtype_bytes(t_.dtype, 1));
        for (std::int64_t e = 0; e < E; ++e)
          copy(moe_expert_name(m_, layer, e, ExpertMatrix::kDown), {H, I},
               [&](std::byte *dst) { transpose(t_.data + e * I * H * es, I, H, 1, 0, dst, es); });
      }
    } else if (rest == "mlp.experts.down_proj_bias") {
      expect_plain();
      expect_shape({E, H}, "(experts, hidden_size)");
      const std::size_t per = static_cast<std::size_t>(dtype_bytes(t_.dtype, H));
      for (std::int64_t e = 0; e < E; ++e)
        view(moe_expert_bias_name(m_, layer, e, ExpertMatrix::kDown), {H}, e * per);
    } else {
      return std::nullopt;
    }
    return std::move(out_);
  }

 private:
  // MXFP4 [E, 2I, H]: whole rows, gate = even, up = odd.
  void gate_up_rows(std::int64_t layer, std::int64_t E, std::int64_t I, std::int64_t H) {
    const std::size_t row = static_cast<std::size_t>(dtype_bytes(t_.dtype, H));
    for (std::int64_t e = 0; e < E; ++e)
      for (int j = 0; j < 2; ++j)
        copy(moe_expert_name(m_, layer, e, j == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp),
             {I, H}, [&](std::byte *dst) {
               const std::byte *src = t_.data + (e * 2 * I + j) * row;
               for (std::int64_t i = 0; i < I; ++i)
                 std::memcpy(dst + i * row, src + 2 * i * row, row);
             });
  }
  // [E, H, 2I] (x @ W): gate[i][k] = W[e][k][2i], up[i][k] = W[e][k][2i + 1].
  void gate_up_columns(std::int64_t layer, std::int64_t E, std::int64_t I, std::int64_t H) {
    const std::size_t es = static_cast<std::size_t>(dtype_bytes(t_.dtype, 1));
    for (std::int64_t e = 0; e < E; ++e)
      for (int j = 0; j < 2; ++j)
        copy(moe_expert_name(m_, layer, e, j == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp),
             {I, H}, [&](std::byte *dst) {
               transpose(t_.data + e * H * 2 * I * es, H, 2 * I, 2, j, dst, es);
             });
  }
  // dst[c][r] = src[r][col_step * c + col_first] for r < rows, c < cols / col_step:
  // a transpose of every col_step-th column, in tiles so both sides stay in cache.
  static void transpose(const std::byte *src, std::int64_t rows, std::int64_t cols,
                        std::int64_t col_step, std::int64_t col_first, std::byte *dst,
                        std::size_t es) {
    const std::int64_t out_rows = cols / col_step;
    constexpr std::int64_t kTile = 32;
    for (std::int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (std::int64_t c0 = 0; c0 < out_rows; c0 += kTile)
        for (std::int64_t c = c0; c < std::min(c0 + kTile, out_rows); ++c)
          for (std::int64_t r = r0; r < std::min(r0 + kTile, rows); ++r)
            std::memcpy(dst + (c * rows + r) * es, src + (r * cols + col_step * c + col_first) * es,
                        es);
  }

  const TensorView &t_;
  const ModelConfig &c_;
  const MoeConfig &m_;
  std::string origin_;
  GptOssTensors out_;
};

}  // namespace

std::string gpt_oss_stored_name(const std::string &keel_name) {
  std::int64_t layer = 0;
  std::string_view rest;
  if (!split_layer(keel_name, layer, rest) || !rest.starts_with("mlp.")) return {};
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  if (rest == "mlp.gate.weight") return p + "router.weight";
  if (rest == "mlp.gate.bias") return p + "router.bias";
  if (!rest.starts_with("mlp.experts.")) return {};
  const bool bias = rest.ends_with(".bias");
  const bool down = rest.find(".down_proj.") != std::string_view::npos;
  return p + "experts." + (down ? "down_proj" : "gate_up_proj") + (bias ? "_bias" : "");
}

std::optional<GptOssTensors> split_gpt_oss_tensor(const TensorView &t, const ModelConfig &c,
                                                  const std::string &file) {
  if (c.arch != Arch::kGptOss || !c.moe) return std::nullopt;
  return Splitter(t, c, file).run();
}

}  // namespace keel
