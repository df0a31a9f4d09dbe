#include "exec/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace keel::cpu {

RopeTable make_rope_table(const ModelConfig &cfg) {
  RopeTable t;
  // A partial rotary factor (GLM-4.5) rotates the first rot_dim of each head only.
  t.rot_dim =
      static_cast<std::int64_t>(static_cast<double>(cfg.head_dim) * cfg.partial_rotary_factor);
  t.style = cfg.rope_style;
  const std::int64_t dim = t.rot_dim, half = dim / 2;
  if (dim <= 0 || dim % 2 != 0 || dim > cfg.head_dim)
    throw Error(ErrorCode::kFormat,
                "config: the rotary part of head_dim must be even, positive and within head_dim");
  const float base = static_cast<float>(cfg.rope_theta);
  // HF: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
  std::vector<float> pos_freq(half);
  for (std::int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freq[i] = std::pow(base, e);
  }
  t.inv_freq.resize(half);
  for (std::int64_t i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freq[i];

  const auto &s = cfg.rope_scaling;
  const float factor = static_cast<float>(s.factor);
  switch (s.type) {
    case RopeScaling::Type::kNone:
      break;
    case RopeScaling::Type::kLinear:
      for (auto &f : t.inv_freq) f /= factor;
      break;
    case RopeScaling::Type::kLlama3: {
      const double old_ctx = static_cast<double>(s.original_max_position);
      const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
      for (auto &f : t.inv_freq) {
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        float g = wavelen > low_wl ? f / factor : f;
        const bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
        if (medium) {
          const float smooth = static_cast<float>((old_ctx / wavelen - s.low_freq_factor) /
                                                  (s.high_freq_factor - s.low_freq_factor));
          g = (1.0f - smooth) * g / factor + smooth * g;
        }
        f = g;
      }
      break;
    }
    case RopeScaling::Type::kYarn: {
      const double orig = static_cast<double>(s.original_max_position);
      auto correction_dim = [&](double rot) {
        return (static_cast<double>(dim) * std::log(orig / (rot * 2 * std::numbers::pi))) /
               (2 * std::log(cfg.rope_theta));
      };
      double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
      if (s.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (std::int64_t i = 0; i < half; ++i) {
        const float ramp = std::clamp(
            static_cast<float>((static_cast<float>(i) - low) / (high - low)), 0.0f, 1.0f);
        const float extrap_factor = 1.0f - ramp;
        const float extrap = 1.0f / pos_freq[i], interp = 1.0f / (factor * pos_freq[i]);
        t.inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
      }
      const double att = s.attention_factor
                             ? *s.attention_factor
                             : (s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0);
      t.attention_scaling = static_cast<float>(att);
      break;
    }
  }
  // GGUF llama files carry llama3 scaling as per-pair divisors (rope_freqs.weight).
  if (!cfg.rope_freq_factors.empty()) {
    if (static_cast<std::int64_t>(cfg.rope_freq_factors.size()) != half)
      throw Error(ErrorCode::kFormat,
                  "rope_freqs.weight: expected head_dim / 2 = " + std::to_string(half) +
                      " factors, got " + std::to_string(cfg.rope_freq_factors.size()));
    for (std::int64_t i = 0; i < half; ++i) t.inv_freq[i] /= cfg.rope_freq_factors[i];
  }
  return t;
}

void apply_rope(const RopeTable &rope, float *x, std::int64_t tokens, std::int64_t heads,
                std::int64_t head_dim, const std::int32_t *positions) {
  const std::int64_t half = rope.rot_dim / 2;
  std::vector<float> cs(half), sn(half);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float p = static_cast<float>(positions[t]);
    for (std::int64_t i = 0; i < half; ++i) {
      const float a = p * rope.inv_freq[i];
      cs[i] = std::cos(a) * rope.attention_scaling;
      sn[i] = std::sin(a) * rope.attention_scaling;
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      float *v = x + (t * heads + h) * head_dim;
      if (rope.style == RopeStyle::kNeox) {
        for (std::int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = b * cs[i] + a * sn[i];
        }
      } else {
        for (std::int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = b * cs[i] + a * sn[i];
        }
      }
    }
  }
}

}  // namespace keel::cpu
