// A tiny random Llama (host weights, HF names) and a plain CPU forward pass that rounds
// to bf16 where the CUDA runner does, as the reference for the runner tests.
#pragma once

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor_view.h"
#include "exec/cuda/rope_table.h"
#include "formats/model_config.h"

namespace keel::cuda::test {

struct HostTensor {
  std::vector<std::int64_t> shape;
  DType dtype = DType::kBF16;
  std::vector<std::uint16_t> bf16;  // when dtype is bf16
  std::vector<float> f32;           // when dtype is f32
  std::vector<float> values;        // what the model computes with (bf16-exact)
};

inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

class TinyLlama {
 public:
  explicit TinyLlama(std::uint32_t seed, bool tied = false) {
    cfg.arch_name = "llama";
    cfg.vocab_size = 512;
    cfg.hidden_size = 128;
    cfg.intermediate_size = 256;
    cfg.num_layers = 2;
    cfg.num_heads = 4;
    cfg.num_kv_heads = 2;
    cfg.head_dim = 32;
    cfg.rms_norm_eps = 1e-5;
    cfg.rope_theta = 10000.0;
    cfg.rope_scaling.type = RopeScaling::Type::kLlama3;
    cfg.rope_scaling.factor = 8.0;
    cfg.rope_scaling.original_max_position = 64;
    cfg.max_position_embeddings = 4096;
    cfg.tie_word_embeddings = tied;
    std::mt19937 rng(seed);
    const auto H = cfg.hidden_size, I = cfg.intermediate_size, hd = cfg.head_dim;
    add("model.embed_tokens.weight", {cfg.vocab_size, H}, 1.0f, rng);
    if (!tied) add("lm_head.weight", {cfg.vocab_size, H}, std::sqrt(3.0f / H), rng);
    add_norm("model.norm.weight", H, rng);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add_norm(p + "input_layernorm.weight", H, rng);
      add(p + "self_attn.q_proj.weight", {cfg.num_heads * hd, H}, std::sqrt(3.0f / H), rng);
      add(p + "self_attn.k_proj.weight", {cfg.num_kv_heads * hd, H}, std::sqrt(3.0f / H), rng);
      add(p + "self_attn.v_proj.weight", {cfg.num_kv_heads * hd, H}, std::sqrt(3.0f / H), rng);
      add(p + "self_attn.o_proj.weight", {H, cfg.num_heads * hd},
          std::sqrt(3.0f / (cfg.num_heads * hd)), rng);
      add_norm(p + "post_attention_layernorm.weight", H, rng);
      add(p + "mlp.gate_proj.weight", {I, H}, std::sqrt(3.0f / H), rng);
      add(p + "mlp.up_proj.weight", {I, H}, std::sqrt(3.0f / H), rng);
      add(p + "mlp.down_proj.weight", {H, I}, std::sqrt(3.0f / I), rng);
    }
  }

  TensorView view(const std::string &name) const {
    const HostTensor &t = tensors.at(name);
    TensorView v;
    v.name = name;
    v.dtype = t.dtype;
    v.shape = t.shape;
    if (t.dtype == DType::kBF16) {
      v.data = reinterpret_cast<const std::byte *>(t.bf16.data());
      v.nbytes = t.bf16.size() * 2;
    } else {
      v.data = reinterpret_cast<const std::byte *>(t.f32.data());
      v.nbytes = t.f32.size() * 4;
    }
    return v;
  }

  // Logits [tokens.size(), vocab] for every position of one sequence starting at 0.
  std::vector<float> forward(const std::vector<TokenId> &tokens) const {
    const std::int64_t T = tokens.size(), H = cfg.hidden_size, I = cfg.intermediate_size,
                       hd = cfg.head_dim;
    const std::int64_t nh = cfg.num_heads, nkv = cfg.num_kv_heads, V = cfg.vocab_size;
    const RopeTable rope = make_rope_table(cfg);
    std::vector<float> res(T * H), normed(T * H);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t i = 0; i < H; ++i)
        res[t * H + i] = w("model.embed_tokens.weight")[tokens[t] * H + i];
    auto rmsnorm = [&](const std::vector<float> &wt) {
      for (std::int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (std::int64_t i = 0; i < H; ++i) ss += double(res[t * H + i]) * res[t * H + i];
        const double inv = 1.0 / std::sqrt(ss / H + cfg.rms_norm_eps);
        for (std::int64_t i = 0; i < H; ++i)
          normed[t * H + i] = round_bf16(float(res[t * H + i] * inv * wt[i]));
      }
    };
    // y[T, N] = x[T, K] w[N, K]^T, rounded to bf16.
    auto linear = [&](const std::vector<float> &x, const std::vector<float> &wt, std::int64_t N,
                      std::int64_t K) {
      std::vector<float> y(T * N);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t n = 0; n < N; ++n) {
          double acc = 0;
          for (std::int64_t k = 0; k < K; ++k) acc += double(x[t * K + k]) * wt[n * K + k];
          y[t * N + n] = round_bf16(float(acc));
        }
      return y;
    };
    for (int l = 0; l < cfg.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      rmsnorm(w(p + "input_layernorm.weight"));
      auto q = linear(normed, w(p + "self_attn.q_proj.weight"), nh * hd, H);
      auto k = linear(normed, w(p + "self_attn.k_proj.weight"), nkv * hd, H);
      auto v = linear(normed, w(p + "self_attn.v_proj.weight"), nkv * hd, H);
      auto apply_rope = [&](std::vector<float> &x, std::int64_t heads) {
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t i = 0; i < hd / 2; ++i) {
              const float angle = float(t) * rope.inv_freq[i];
              const double c = std::cos(double(angle)) * rope.mscale,
                           s = std::sin(double(angle)) * rope.mscale;
              float *hp = x.data() + (t * heads + h) * hd;
              const double x1 = hp[i], x2 = hp[i + hd / 2];
              hp[i] = round_bf16(float(x1 * c - x2 * s));
              hp[i + hd / 2] = round_bf16(float(x2 * c + x1 * s));
            }
      };
      apply_rope(q, nh);
      apply_rope(k, nkv);
      std::vector<float> attn(T * nh * hd);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t h = 0; h < nh; ++h) {
          const std::int64_t kvh = h / (nh / nkv);
          std::vector<double> sc(t + 1);
          double mx = -INFINITY, sum = 0;
          for (std::int64_t j = 0; j <= t; ++j) {
            double dot = 0;
            for (std::int64_t d = 0; d < hd; ++d)
              dot += double(q[(t * nh + h) * hd + d]) * k[(j * nkv + kvh) * hd + d];
            sc[j] = dot / std::sqrt(double(hd));
            mx = std::max(mx, sc[j]);
          }
          for (auto &s : sc) sum += (s = std::exp(s - mx));
          for (std::int64_t d = 0; d < hd; ++d) {
            double acc = 0;
            for (std::int64_t j = 0; j <= t; ++j) acc += sc[j] * v[(j * nkv + kvh) * hd + d];
            attn[(t * nh + h) * hd + d] = round_bf16(float(acc / sum));
          }
        }
      auto o = linear(attn, w(p + "self_attn.o_proj.weight"), H, nh * hd);
      for (std::int64_t i = 0; i < T * H; ++i) res[i] += o[i];
      rmsnorm(w(p + "post_attention_layernorm.weight"));
      auto g = linear(normed, w(p + "mlp.gate_proj.weight"), I, H);
      auto u = linear(normed, w(p + "mlp.up_proj.weight"), I, H);
      std::vector<float> act(T * I);
      for (std::int64_t i = 0; i < T * I; ++i)
        act[i] = round_bf16(float(g[i] / (1 + std::exp(-double(g[i]))) * u[i]));
      auto down = linear(act, w(p + "mlp.down_proj.weight"), H, I);
      for (std::int64_t i = 0; i < T * H; ++i) res[i] += down[i];
    }
    rmsnorm(w("model.norm.weight"));
    const auto &head =
        cfg.tie_word_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight");
    std::vector<float> logits(T * V);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t n = 0; n < V; ++n) {
        double acc = 0;
        for (std::int64_t kk = 0; kk < H; ++kk)
          acc += double(normed[t * H + kk]) * head[n * H + kk];
        logits[t * V + n] = float(acc);
      }
    return logits;
  }

  ModelConfig cfg;
  std::map<std::string, HostTensor> tensors;

 private:
  const std::vector<float> &w(const std::string &name) const { return tensors.at(name).values; }
  void add(const std::string &name, std::vector<std::int64_t> shape, float a, std::mt19937 &rng) {
    HostTensor t;
    t.shape = std::move(shape);
    std::int64_t n = 1;
    for (auto d : t.shape) n *= d;
    std::uniform_real_distribution<float> dist(-a, a);
    for (std::int64_t i = 0; i < n; ++i) {
      t.bf16.push_back(f32_to_bf16(dist(rng)));
      t.values.push_back(bf16_to_f32(t.bf16.back()));
    }
    tensors[name] = std::move(t);
  }
  // Norm weights stored as f32 (exercises the runner's conversion), bf16-exact values.
  void add_norm(const std::string &name, std::int64_t n, std::mt19937 &rng) {
    HostTensor t;
    t.shape = {n};
    t.dtype = DType::kF32;
    std::uniform_real_distribution<float> dist(0.7f, 1.3f);
    for (std::int64_t i = 0; i < n; ++i) {
      t.values.push_back(round_bf16(dist(rng)));
      t.f32.push_back(t.values.back());
    }
    tensors[name] = std::move(t);
  }
};

}  // namespace keel::cuda::test
