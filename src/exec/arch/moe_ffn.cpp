#include "exec/arch/moe_ffn.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "exec/cpu/activation.h"

namespace keel::arch {

namespace {

std::string shape_str(const std::vector<std::int64_t> &s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

TensorView need(const WeightLookup &lookup, const std::string &name,
                const std::vector<std::int64_t> &shape) {
  auto t = lookup(name);
  if (!t) throw Error(ErrorCode::kFormat, name + ": tensor missing");
  if (t->shape != shape)
    throw Error(ErrorCode::kFormat, name + ": shape " + shape_str(t->shape) + " where " +
                                        shape_str(shape) + " was expected");
  if (static_cast<std::int64_t>(t->nbytes) < dtype_bytes(t->dtype, t->numel()) ||
      (t->cols() % dtype_info(t->dtype).block_elems) != 0)
    throw Error(ErrorCode::kFormat, name + ": data size does not match shape and dtype");
  return *t;
}

}  // namespace

void route_token(const float *logits, std::int64_t E, std::int64_t k, bool norm_topk_prob,
                 std::int32_t *ids, float *weights) {
  double mx = logits[0];
  for (std::int64_t e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[e]));
  double sum = 0;
  for (std::int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e]) - mx);
  // Selection by repeated max keeps the lower index on ties; k is small (<= 8 or so).
  double chosen_sum = 0;
  std::vector<double> p(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < k; ++j) {
    std::int32_t best = -1;
    for (std::int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (std::int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (taken) continue;
      if (best < 0 || logits[e] > logits[best]) best = static_cast<std::int32_t>(e);
    }
    ids[j] = best;
    p[j] = std::exp(static_cast<double>(logits[best]) - mx) / sum;
    chosen_sum += p[j];
  }
  for (std::int64_t j = 0; j < k; ++j)
    weights[j] = static_cast<float>(norm_topk_prob ? p[j] / chosen_sum : p[j]);
}

MoeFfn::MoeFfn(const ModelConfig &cfg, std::int64_t layer, const WeightLookup &lookup)
    : hidden_(cfg.hidden_size) {
  if (!cfg.moe) throw Error(ErrorCode::kInternal, "MoeFfn: the config has no experts");
  const MoeConfig &m = *cfg.moe;
  I_ = m.expert_intermediate;
  E_ = m.num_experts;
  k_ = m.top_k;
  norm_topk_prob_ = m.norm_topk_prob;
  router_ = need(lookup, moe_router_name(m, layer), {E_, hidden_});
  experts_.resize(static_cast<std::size_t>(E_));
  for (std::int64_t e = 0; e < E_; ++e) {
    ExpertWeights &x = experts_[static_cast<std::size_t>(e)];
    x.gate = need(lookup, moe_expert_name(m, layer, e, ExpertMatrix::kGate), {I_, hidden_});
    x.up = need(lookup, moe_expert_name(m, layer, e, ExpertMatrix::kUp), {I_, hidden_});
    x.down = need(lookup, moe_expert_name(m, layer, e, ExpertMatrix::kDown), {hidden_, I_});
  }
}

std::int64_t MoeFfn::active_bytes() const {
  std::int64_t per_expert = 0;
  if (!experts_.empty()) {
    const ExpertWeights &x = experts_.front();
    per_expert = static_cast<std::int64_t>(x.gate.nbytes + x.up.nbytes + x.down.nbytes);
  }
  return static_cast<std::int64_t>(router_.nbytes) + k_ * per_expert;
}

void MoeFfn::forward(const float *h, std::int64_t T, float *y, ThreadPool &pool,
                     cpu::LinearScratch &scratch, Workspace &ws) const {
  std::fill(y, y + T * hidden_, 0.0f);
  if (T == 0) return;
  float *logits = ws.floats(static_cast<std::size_t>(T * E_));  // [T, E]
  cpu::linear(router_, h, T, logits, pool, scratch);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T * k_));
  std::vector<float> w(static_cast<std::size_t>(T * k_));
  for (std::int64_t t = 0; t < T; ++t)
    route_token(logits + t * E_, E_, k_, norm_topk_prob_, ids.data() + t * k_, w.data() + t * k_);

  // Group the (token, weight) slots by expert: counting sort, tokens ascending.
  std::vector<std::int64_t> start(static_cast<std::size_t>(E_ + 1), 0);
  for (std::int32_t e : ids) ++start[static_cast<std::size_t>(e) + 1];
  for (std::int64_t e = 0; e < E_; ++e) start[e + 1] += start[e];
  std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
  std::vector<std::int32_t> slot_token(ids.size());
  std::vector<float> slot_weight(ids.size());
  std::int64_t most = 0;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < k_; ++j) {
      const std::int64_t at = fill[ids[t * k_ + j]]++;
      slot_token[at] = static_cast<std::int32_t>(t);
      slot_weight[at] = w[t * k_ + j];
    }
  for (std::int64_t e = 0; e < E_; ++e) most = std::max(most, start[e + 1] - start[e]);

  float *xin = ws.floats(static_cast<std::size_t>(most * hidden_));  // [n, hidden]
  float *gate = ws.floats(static_cast<std::size_t>(most * I_));      // [n, I]
  float *up = ws.floats(static_cast<std::size_t>(most * I_));        // [n, I]
  float *out = ws.floats(static_cast<std::size_t>(most * hidden_));  // [n, hidden]
  // Experts in index order, so each token sums its experts in the same order whatever
  // else is in the batch (linear() is batch invariant too).
  for (std::int64_t e = 0; e < E_; ++e) {
    const std::int64_t b = start[e], n = start[e + 1] - start[e];
    if (n == 0) continue;
    for (std::int64_t i = 0; i < n; ++i)
      std::copy(h + slot_token[b + i] * hidden_, h + (slot_token[b + i] + 1) * hidden_,
                xin + i * hidden_);
    const ExpertWeights &x = experts_[static_cast<std::size_t>(e)];
    const cpu::LinearJob gate_up[] = {{&x.gate, gate}, {&x.up, up}};
    cpu::linear_multi(gate_up, xin, n, pool, scratch);
    cpu::swiglu(gate, up, gate, n * I_);
    cpu::linear(x.down, gate, n, out, pool, scratch);
    for (std::int64_t i = 0; i < n; ++i) {
      float *dst = y + slot_token[b + i] * hidden_;
      const float *src = out + i * hidden_;
      const float wt = slot_weight[b + i];
      for (std::int64_t c = 0; c < hidden_; ++c) dst[c] += wt * src[c];
    }
  }
}

}  // namespace keel::arch
