#include "exec/arch/moe_ffn.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "exec/cpu/activation.h"
#include "exec/cpu/quant_blocks.h"

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

void route_token_grouped_sigmoid(const float *logits, const float *bias, std::int64_t E,
                                 std::int64_t k, std::int64_t n_group, std::int64_t topk_group,
                                 bool norm_topk_prob, double scale, std::int32_t *ids,
                                 float *weights) {
  std::vector<double> s(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E));
  for (std::int64_t e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    choice[e] = s[e] + (bias ? bias[e] : 0.0f);
  }
  const std::int64_t per = E / n_group;
  if (topk_group < n_group) {
    std::vector<double> group(static_cast<std::size_t>(n_group));
    for (std::int64_t g = 0; g < n_group; ++g) {
      double a = -INFINITY, b = -INFINITY;  // the two best of the group
      for (std::int64_t e = g * per; e < (g + 1) * per; ++e) {
        if (choice[e] > a) {
          b = a;
          a = choice[e];
        } else if (choice[e] > b) {
          b = choice[e];
        }
      }
      group[g] = a + b;
    }
    std::vector<char> keep(static_cast<std::size_t>(n_group), 0);
    for (std::int64_t j = 0; j < topk_group; ++j) {
      std::int64_t best = -1;
      for (std::int64_t g = 0; g < n_group; ++g)
        if (!keep[g] && (best < 0 || group[g] > group[best])) best = g;
      if (best >= 0) keep[static_cast<std::size_t>(best)] = 1;
    }
    for (std::int64_t e = 0; e < E; ++e)
      if (!keep[e / per]) choice[e] = 0.0;
  }
  double sum = 0;
  for (std::int64_t j = 0; j < k; ++j) {
    std::int32_t best = -1;
    for (std::int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (std::int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || choice[e] > choice[best])) best = static_cast<std::int32_t>(e);
    }
    ids[j] = best;
    sum += s[best];
  }
  for (std::int64_t j = 0; j < k; ++j) {
    const double w = norm_topk_prob ? s[ids[j]] / (sum + 1e-20) : s[ids[j]];
    weights[j] = static_cast<float>(w * scale);
  }
}

void route_token_topk_softmax(const float *logits, std::int64_t E, std::int64_t k,
                              std::int32_t *ids, float *weights) {
  for (std::int64_t j = 0; j < k; ++j) {
    std::int32_t best = -1;
    for (std::int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (std::int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = static_cast<std::int32_t>(e);
    }
    ids[j] = best;
  }
  // The first pick is the largest logit: the softmax's max.
  const double mx = logits[ids[0]];
  double sum = 0;
  for (std::int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(logits[ids[j]]) - mx);
  for (std::int64_t j = 0; j < k; ++j)
    weights[j] = static_cast<float>(std::exp(static_cast<double>(logits[ids[j]]) - mx) / sum);
}

void clamped_swiglu(const float *gate, const float *up, float *out, std::int64_t n, float limit,
                    float alpha) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
  }
}

MoeFfn::MoeFfn(const ModelConfig &cfg, std::int64_t layer, const WeightLookup &lookup)
    : hidden_(cfg.hidden_size) {
  if (!cfg.moe) throw Error(ErrorCode::kInternal, "MoeFfn: the config has no experts");
  const MoeConfig &m = *cfg.moe;
  I_ = m.expert_intermediate;
  E_ = m.num_experts;
  k_ = m.top_k;
  moe_ = m;
  router_ = need(lookup, moe_router_name(m, layer), {E_, hidden_});
  if (m.scoring == MoeConfig::Scoring::kSigmoid) {
    const TensorView b = need(lookup, moe_router_bias_name(m, layer), {E_});
    correction_bias_.resize(static_cast<std::size_t>(E_));
    cpu::dequantize_row(b.dtype, b.data, correction_bias_.data(), E_);
  }
  auto vec = [&](const std::string &name, std::int64_t n) {
    const TensorView b = need(lookup, name, {n});
    std::vector<float> v(static_cast<std::size_t>(n));
    cpu::dequantize_row(b.dtype, b.data, v.data(), n);
    return v;
  };
  if (m.router_bias) router_bias_ = vec(moe_router_logit_bias_name(m, layer), E_);
  if (m.shared_intermediate > 0) {
    const std::int64_t S = m.shared_intermediate;
    shared_.emplace();
    shared_->gate = need(lookup, moe_shared_name(m, layer, ExpertMatrix::kGate), {S, hidden_});
    shared_->up = need(lookup, moe_shared_name(m, layer, ExpertMatrix::kUp), {S, hidden_});
    shared_->down = need(lookup, moe_shared_name(m, layer, ExpertMatrix::kDown), {hidden_, S});
  }
  experts_.resize(static_cast<std::size_t>(E_));
  for (std::int64_t e = 0; e < E_; ++e) {
    ExpertWeights &x = experts_[static_cast<std::size_t>(e)];
    x.gate = need(lookup, moe_expert_name(m, layer, e, ExpertMatrix::kGate), {I_, hidden_});
    x.up = need(lookup, moe_expert_name(m, layer, e, ExpertMatrix::kUp), {I_, hidden_});
    x.down = need(lookup, moe_expert_name(m, layer, e, ExpertMatrix::kDown), {hidden_, I_});
    if (m.expert_bias) {
      x.gate_bias = vec(moe_expert_bias_name(m, layer, e, ExpertMatrix::kGate), I_);
      x.up_bias = vec(moe_expert_bias_name(m, layer, e, ExpertMatrix::kUp), I_);
      x.down_bias = vec(moe_expert_bias_name(m, layer, e, ExpertMatrix::kDown), hidden_);
    }
  }
}

std::int64_t MoeFfn::active_bytes() const {
  std::int64_t per_expert = 0;
  if (!experts_.empty()) {
    const ExpertWeights &x = experts_.front();
    per_expert = static_cast<std::int64_t>(x.gate.nbytes + x.up.nbytes + x.down.nbytes);
  }
  std::int64_t shared = 0;
  if (shared_)
    shared =
        static_cast<std::int64_t>(shared_->gate.nbytes + shared_->up.nbytes + shared_->down.nbytes);
  return static_cast<std::int64_t>(router_.nbytes) + k_ * per_expert + shared;
}

void MoeFfn::route(const float *logits, std::int64_t T, std::int32_t *ids, float *w) const {
  for (std::int64_t t = 0; t < T; ++t) {
    if (moe_.scoring == MoeConfig::Scoring::kTopkSoftmax)
      route_token_topk_softmax(logits + t * E_, E_, k_, ids + t * k_, w + t * k_);
    else if (moe_.scoring == MoeConfig::Scoring::kSigmoid)
      route_token_grouped_sigmoid(logits + t * E_, correction_bias_.data(), E_, k_, moe_.n_group,
                                  moe_.topk_group, moe_.norm_topk_prob, moe_.routed_scaling_factor,
                                  ids + t * k_, w + t * k_);
    else
      route_token(logits + t * E_, E_, k_, moe_.norm_topk_prob, ids + t * k_, w + t * k_);
  }
}

void MoeFfn::forward(const float *h, std::int64_t T, float *y, ThreadPool &pool,
                     cpu::LinearScratch &scratch, Workspace &ws) {
  std::fill(y, y + T * hidden_, 0.0f);
  if (T == 0) return;
  float *logits = ws.floats(static_cast<std::size_t>(T * E_));  // [T, E]
  cpu::linear(router_, h, T, logits, pool, scratch);
  if (!router_bias_.empty())
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t e = 0; e < E_; ++e) logits[t * E_ + e] += router_bias_[e];
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T * k_));
  std::vector<float> w(static_cast<std::size_t>(T * k_));
  route(logits, T, ids.data(), w.data());

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

  // Every slot's expert output, [T * k, hidden] in slot order; summed per token below.
  float *slot_out = ws.floats(static_cast<std::size_t>(T * k_ * hidden_));
  // y[r, :] += bias for n rows (nothing when the bias is empty).
  auto add_rows = [](float *y, const std::vector<float> &bias, std::int64_t n) {
    const std::int64_t w = static_cast<std::int64_t>(bias.size());
    for (std::int64_t r = 0; r < n && w > 0; ++r)
      for (std::int64_t i = 0; i < w; ++i) y[r * w + i] += bias[i];
  };
  // Expert e on its n slots from b, with `p` (a pool) and buffers xin [n, hidden],
  // gate and up [n, I].
  auto run_expert = [&](std::int64_t e, ThreadPool &p, cpu::LinearScratch &sc, float *xin,
                        float *gate, float *up) {
    const std::int64_t b = start[e], n = start[e + 1] - start[e];
    for (std::int64_t i = 0; i < n; ++i)
      std::copy(h + slot_token[b + i] * hidden_, h + (slot_token[b + i] + 1) * hidden_,
                xin + i * hidden_);
    const ExpertWeights &x = experts_[static_cast<std::size_t>(e)];
    const cpu::LinearJob gate_up[] = {{&x.gate, gate}, {&x.up, up}};
    cpu::linear_multi(gate_up, xin, n, p, sc);
    add_rows(gate, x.gate_bias, n);
    add_rows(up, x.up_bias, n);
    if (moe_.swiglu_limit)
      clamped_swiglu(gate, up, gate, n * I_, static_cast<float>(*moe_.swiglu_limit),
                     static_cast<float>(moe_.swiglu_alpha));
    else
      cpu::swiglu(gate, up, gate, n * I_);
    cpu::linear(x.down, gate, n, slot_out + b * hidden_, p, sc);
    add_rows(slot_out + b * hidden_, x.down_bias, n);
  };
  std::vector<std::int64_t> active;
  for (std::int64_t e = 0; e < E_; ++e)
    if (start[e + 1] > start[e]) active.push_back(e);
  const int nth = pool.size();
  constexpr std::int64_t kMaxRowsForExpertSplit = 16;
  if (nth > 1 && static_cast<int>(active.size()) >= nth && most <= kMaxRowsForExpertSplit) {
    while (static_cast<int>(workers_.size()) < nth) workers_.push_back(std::make_unique<Worker>());
    const std::int64_t per = most * (hidden_ + 2 * I_);
    float *bufs = ws.floats(static_cast<std::size_t>(nth * per));
    const std::int64_t A = static_cast<std::int64_t>(active.size());
    pool.run([&](int tid, int n) {
      float *xin = bufs + tid * per, *gate = xin + most * hidden_, *up = gate + most * I_;
      Worker &wk = *workers_[static_cast<std::size_t>(tid)];
      for (std::int64_t i = tid; i < A; i += n)
        run_expert(active[static_cast<std::size_t>(i)], wk.inline_pool, wk.scratch, xin, gate, up);
    });
  } else {
    float *xin = ws.floats(static_cast<std::size_t>(most * hidden_));  // [n, hidden]
    float *gate = ws.floats(static_cast<std::size_t>(most * I_));      // [n, I]
    float *up = ws.floats(static_cast<std::size_t>(most * I_));        // [n, I]
    for (std::int64_t e : active) run_expert(e, pool, scratch, xin, gate, up);
  }
  // Slots are in expert order, so each token adds its experts in index order.
  for (std::int64_t s = 0; s < T * k_; ++s) {
    float *dst = y + slot_token[s] * hidden_;
    const float *src = slot_out + s * hidden_;
    const float wt = slot_weight[s];
    for (std::int64_t c = 0; c < hidden_; ++c) dst[c] += wt * src[c];
  }
  if (shared_) {  // every token, after its routed experts
    const std::int64_t S = moe_.shared_intermediate;
    float *gate = ws.floats(static_cast<std::size_t>(T * S));       // [T, S]
    float *up = ws.floats(static_cast<std::size_t>(T * S));         // [T, S]
    float *out = ws.floats(static_cast<std::size_t>(T * hidden_));  // [T, hidden]
    const cpu::LinearJob gate_up[] = {{&shared_->gate, gate}, {&shared_->up, up}};
    cpu::linear_multi(gate_up, h, T, pool, scratch);
    cpu::swiglu(gate, up, gate, T * S);
    cpu::linear(shared_->down, gate, T, out, pool, scratch);
    for (std::int64_t i = 0; i < T * hidden_; ++i) y[i] += out[i];
  }
}

}  // namespace keel::arch
