// What the CPU MoE block tests share (test_moe_ffn, test_moe_glm_routing,
// test_moe_gpt_oss): a layer's f32 tensors held by HF name and the lookup MoeFfn reads
// them through, random inputs, one forward of the block, and its distance to a float64
// reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "exec/arch/moe_ffn.h"

namespace keel::arch::test {

struct F32Tensors {
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, std::vector<std::int64_t>> shape;

  std::mt19937 rng;  // seeded by the layer; one draw after another, tensor by tensor
  std::normal_distribution<float> nd{0.0f, 1.0f};

  // A tensor of N(0, std^2) values, the next ones drawn.
  void add(const std::string &name, std::vector<std::int64_t> s, float std) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float &x : v) x = std * nd(rng);
    data[name] = std::move(v);
    shape[name] = std::move(s);
  }

  const std::vector<float> &at(const std::string &name) const { return data.at(name); }

  std::optional<TensorView> view(const std::string &name) const {
    auto it = data.find(name);
    if (it == data.end()) return std::nullopt;
    TensorView t;
    t.name = name;
    t.dtype = DType::kF32;
    t.shape = shape.at(name);
    t.data = reinterpret_cast<const std::byte *>(it->second.data());
    t.nbytes = it->second.size() * sizeof(float);
    return t;
  }

  WeightLookup lookup() const {
    return [this](const std::string &name) { return view(name); };
  }
};

// x: [T, H] of N(0, 1) values.
inline std::vector<float> random_input(std::int64_t T, std::int64_t H, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(T * H));
  for (float &v : x) v = nd(rng);
  return x;
}

// y: [T, H], the block's output for x: [T, H].
inline std::vector<float> run(MoeFfn &moe, const std::vector<float> &x, std::int64_t T,
                              std::int64_t H, ThreadPool &pool) {
  cpu::LinearScratch scratch;
  Workspace ws;
  std::vector<float> y(static_cast<std::size_t>(T * H));
  moe.forward(x.data(), T, y.data(), pool, scratch, ws);
  return y;
}

// The largest absolute difference from the reference, and the reference's largest
// magnitude (the scale the difference is judged against).
struct RefDistance {
  double worst = 0, scale = 0;
};
inline RefDistance distance(const std::vector<float> &y, const std::vector<double> &ref) {
  RefDistance d;
  for (std::size_t i = 0; i < y.size(); ++i) {
    d.worst = std::max(d.worst, std::abs(y[i] - ref[i]));
    d.scale = std::max(d.scale, std::abs(ref[i]));
  }
  return d;
}

}  // namespace keel::arch::test
