#include "exec/arch/head_cache_attention.h"

#include <algorithm>
#include <cmath>

namespace keel::arch {

void head_cache_attention(const float *q, const float *k, const float *v, std::int64_t n,
                          std::int64_t H, std::int64_t G, std::int64_t D, const std::int32_t *pos,
                          std::vector<float> &rows, float *att) {
  const std::int64_t row = 2 * G * D;
  for (std::int64_t t = 0; t < n; ++t) {
    float *dst = rows.data() + pos[t] * row;
    std::copy(k + t * G * D, k + (t + 1) * G * D, dst);
    std::copy(v + t * G * D, v + (t + 1) * G * D, dst + G * D);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> score;
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t len = pos[t] + 1;
    score.resize(static_cast<std::size_t>(len));
    for (std::int64_t hd = 0; hd < H; ++hd) {
      const std::int64_t kvh = hd / (H / G);
      const float *qh = q + (t * H + hd) * D;
      float mx = -INFINITY;
      for (std::int64_t j = 0; j < len; ++j) {
        const float *kj = rows.data() + j * row + kvh * D;
        float s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += qh[d] * kj[d];
        score[j] = s * scale;
        mx = std::max(mx, score[j]);
      }
      float sum = 0;
      for (std::int64_t j = 0; j < len; ++j) sum += score[j] = std::exp(score[j] - mx);
      float *o = att + (t * H + hd) * D;
      std::fill(o, o + D, 0.0f);
      for (std::int64_t j = 0; j < len; ++j) {
        const float *vj = rows.data() + j * row + G * D + kvh * D;
        const float w = score[j] / sum;
        for (std::int64_t d = 0; d < D; ++d) o[d] += w * vj[d];
      }
    }
  }
}

}  // namespace keel::arch
