// GGUF-block test matrices for the CUDA quantized-weight tests: random Gaussian rows
// quantized by the CPU reference (formats/quant.cpp), with that reference's dequantization,
// against which the device's GEMVs and GEMMs are checked.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "formats/quant.h"

namespace keel::cuda::test {

// Rows of K random values quantized as `t`: the bytes, and their f32 dequantization.
struct QuantMatrix {
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;
};
inline QuantMatrix make_quant(DType t, std::int64_t rows, std::int64_t K, std::mt19937 &rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> src(rows * K);
  for (auto &x : src) x = d(rng);
  QuantMatrix q;
  q.bytes.resize(dtype_bytes(t, rows * K));
  quantize_row(t, src.data(), q.bytes.data(), rows * K);
  q.values.resize(rows * K);
  dequantize_row(t, q.bytes.data(), q.values.data(), rows * K);
  return q;
}

}  // namespace keel::cuda::test
