// DeepSeek Sparse Attention's indexer on the CPU (glm_moe_dsa): per layer that runs its
// own selection, it scores every earlier token for each query and keeps the index_topk
// best; the layer's attention then reads only those (exec/arch/mla.h).
//
//   q_idx = rope(wq_b q_resid)                  [T, Hi, Di]  (rope on the first rope dims)
//   k_idx = rope(LayerNorm(wk h))               [T, Di]      (kept in the latent cache row)
//   w     = weights_proj h * Hi^-1/2            [T, Hi]
//   score(t, s) = sum_h w[t, h] relu(q_idx[t, h] . k_idx[s] * Di^-1/2)
// A query at position p with p + 1 <= index_topk keeps every position 0..p.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor_view.h"
#include "exec/arch/weight_binding.h"
#include "exec/cpu/linear.h"
#include "exec/cpu/rope.h"
#include "exec/exec_context.h"
#include "formats/model_config.h"

namespace keel::arch {

class DsaIndexer {
 public:
  // Binds model.layers.L.self_attn.indexer.*; throws Error(kFormat) naming a missing or
  // mis-shaped tensor.
  DsaIndexer(const ModelConfig &cfg, std::int64_t layer, const WeightLookup &lookup);

  // h: [T, hidden] (the layer's normed input); q_resid: [T, q_lora]; pos: [T].
  // keys -> k: [T, Di]; queries -> q: [T, Hi, Di], w: [T, Hi].
  void keys(const float *h, std::int64_t T, const std::int32_t *pos, const cpu::RopeTable &rope,
            float *k, ThreadPool &pool, cpu::LinearScratch &scratch) const;
  void queries(const float *h, const float *q_resid, std::int64_t T, const std::int32_t *pos,
               const cpu::RopeTable &rope, float *q, float *w, ThreadPool &pool,
               cpu::LinearScratch &scratch) const;

  // The positions one query keeps: `keys[s]` is position s's index key (s in [0, n));
  // q [Hi, Di], w [Hi]. Fills `out` (unordered); `scores` is scratch.
  void select(const float *q, const float *w, const std::vector<const float *> &keys,
              std::int64_t n, std::vector<std::int32_t> &out, std::vector<float> &scores) const;

  std::int64_t weight_bytes() const;

 private:
  std::int64_t Hi_, Di_, topk_;
  TensorView wq_b_;                         // [Hi Di, q_lora]
  TensorView wk_;                           // [Di, hidden]
  TensorView wproj_;                        // [Hi, hidden]
  std::vector<float> k_norm_w_, k_norm_b_;  // [Di]
};

}  // namespace keel::arch
