#include "exec/cuda/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace keel::cuda {

RopeTable make_rope_table(const ModelConfig &c) {
  const std::int64_t dim = c.head_dim;
  if (dim <= 0 || dim % 2 != 0)
    throw Error(ErrorCode::kFormat,
                "config: head_dim must be even and positive, got " + std::to_string(dim));
  const double base = c.rope_theta;
  const auto &rs = c.rope_scaling;
  RopeTable t;
  t.inv_freq.resize(dim / 2);
  std::vector<double> f(dim / 2);
  // HF: 1 / base ** (arange(0, dim, 2) / dim), computed in float32 from int64 arange.
  for (std::int64_t i = 0; i < dim / 2; ++i)
    f[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));

  switch (rs.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      for (auto &x : f) x /= rs.factor;
      break;
    case RopeScaling::Type::kLlama3: {
      const double old_ctx = static_cast<double>(rs.original_max_position);
      const double low_wavelen = old_ctx / rs.low_freq_factor;
      const double high_wavelen = old_ctx / rs.high_freq_factor;
      for (auto &x : f) {
        const double wavelen = 2.0 * std::numbers::pi / x;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          x /= rs.factor;
        } else {
          const double smooth =
              (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
          x = (1.0 - smooth) * x / rs.factor + smooth * x;
        }
      }
      break;
    }
    case RopeScaling::Type::kYarn: {
      const double maxpos = static_cast<double>(rs.original_max_position);
      auto correction_dim = [&](double rot) {
        return static_cast<double>(dim) * std::log(maxpos / (rot * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(base));
      };
      double low = std::floor(correction_dim(rs.beta_fast));
      double high = std::ceil(correction_dim(rs.beta_slow));
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (std::int64_t i = 0; i < dim / 2; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation_factor = 1.0 - ramp;
        const double extrap = f[i], interp = f[i] / rs.factor;
        f[i] = interp * (1.0 - extrapolation_factor) + extrap * extrapolation_factor;
      }
      t.mscale = static_cast<float>(
          rs.attention_factor.value_or(rs.factor > 1.0 ? 0.1 * std::log(rs.factor) + 1.0 : 1.0));
      break;
    }
  }
  // GGUF llama files carry llama3 scaling as per-pair divisors (rope_freqs.weight).
  if (!c.rope_freq_factors.empty()) {
    if (c.rope_freq_factors.size() != f.size())
      throw Error(ErrorCode::kFormat,
                  "rope_freqs.weight: expected head_dim / 2 = " + std::to_string(f.size()) +
                      " factors, got " + std::to_string(c.rope_freq_factors.size()));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] /= c.rope_freq_factors[i];
  }
  for (std::size_t i = 0; i < f.size(); ++i) t.inv_freq[i] = static_cast<float>(f[i]);
  return t;
}

}  // namespace keel::cuda
