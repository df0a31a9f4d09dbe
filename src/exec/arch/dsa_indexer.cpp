#include "exec/arch/dsa_indexer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace keel::arch {

DsaIndexer::DsaIndexer(const ModelConfig &cfg, std::int64_t layer, const WeightLookup &lookup) {
  if (!cfg.mla || !cfg.mla->dsa())
    throw Error(ErrorCode::kInternal, "dsa indexer: the config has no DSA fields");
  const MlaConfig &m = *cfg.mla;
  Hi_ = m.index_n_heads;
  Di_ = m.index_head_dim;
  topk_ = m.index_topk;
  wq_b_ = need_tensor(lookup, mla_name(layer, "indexer.wq_b.weight"), {Hi_ * Di_, m.q_lora_rank});
  wk_ = need_tensor(lookup, mla_name(layer, "indexer.wk.weight"), {Di_, cfg.hidden_size});
  wproj_ =
      need_tensor(lookup, mla_name(layer, "indexer.weights_proj.weight"), {Hi_, cfg.hidden_size});
  k_norm_w_ = need_vector(lookup, mla_name(layer, "indexer.k_norm.weight"), Di_);
  k_norm_b_ = need_vector(lookup, mla_name(layer, "indexer.k_norm.bias"), Di_);
}

void DsaIndexer::keys(const float *h, std::int64_t T, const std::int32_t *pos,
                      const cpu::RopeTable &rope, float *k, ThreadPool &pool,
                      cpu::LinearScratch &scratch) const {
  cpu::linear(wk_, h, T, k, pool, scratch);
  for (std::int64_t t = 0; t < T; ++t) {  // LayerNorm (eps 1e-6, with bias)
    float *r = k + t * Di_;
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < Di_; ++i) mean += r[i];
    mean /= static_cast<double>(Di_);
    for (std::int64_t i = 0; i < Di_; ++i) var += (r[i] - mean) * (r[i] - mean);
    var /= static_cast<double>(Di_);
    const double inv = 1.0 / std::sqrt(var + 1e-6);
    for (std::int64_t i = 0; i < Di_; ++i)
      r[i] = static_cast<float>((r[i] - mean) * inv) * k_norm_w_[i] + k_norm_b_[i];
  }
  cpu::apply_rope(rope, k, T, 1, Di_, pos);
}

void DsaIndexer::queries(const float *h, const float *q_resid, std::int64_t T,
                         const std::int32_t *pos, const cpu::RopeTable &rope, float *q, float *w,
                         ThreadPool &pool, cpu::LinearScratch &scratch) const {
  cpu::linear(wq_b_, q_resid, T, q, pool, scratch);
  cpu::apply_rope(rope, q, T, Hi_, Di_, pos);
  cpu::linear(wproj_, h, T, w, pool, scratch);
  const float s = 1.0f / std::sqrt(static_cast<float>(Hi_));
  for (std::int64_t i = 0; i < T * Hi_; ++i) w[i] *= s;
}

void DsaIndexer::select(const float *q, const float *w, const std::vector<const float *> &keys,
                        std::int64_t n, std::vector<std::int32_t> &out,
                        std::vector<float> &scores) const {
  out.clear();
  if (n <= topk_) {
    for (std::int64_t s = 0; s < n; ++s) out.push_back(static_cast<std::int32_t>(s));
    return;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(Di_));
  scores.resize(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s) {
    const float *k = keys[s];
    double acc = 0;
    for (std::int64_t hh = 0; hh < Hi_; ++hh) {
      const float *qh = q + hh * Di_;
      float d = 0;
      for (std::int64_t i = 0; i < Di_; ++i) d += qh[i] * k[i];
      d *= scale;
      if (d > 0) acc += static_cast<double>(w[hh]) * d;
    }
    scores[s] = static_cast<float>(acc);
  }
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s) idx[s] = static_cast<std::int32_t>(s);
  // The best topk, ties to the earlier position (torch.topk leaves ties unspecified).
  std::nth_element(idx.begin(), idx.begin() + topk_, idx.end(),
                   [&](std::int32_t a, std::int32_t b) {
                     return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
                   });
  out.assign(idx.begin(), idx.begin() + topk_);
}

std::int64_t DsaIndexer::weight_bytes() const {
  return static_cast<std::int64_t>(wq_b_.nbytes + wk_.nbytes + wproj_.nbytes);
}

}  // namespace keel::arch
