// Row reductions for sampling and logprobs over a vocabulary of logits: max, first argmax,
// and sums of exp in double precision. Written as plain loops the compiler vectorizes
// (no libm call inside, explicit fma), so one definition serves the vector loops and the
// scalar code that must agree with them bit for bit.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"

namespace keel::cpu {

// a * b + c, fused where the target has FMA (the same rounding in every loop of a build).
inline double fmadd(double a, double b, double c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(x) for x <= 0 in double precision: Cody-Waite reduction to |r| <= ln2/2 and a
// degree-13 Taylor polynomial (truncation below 0.05 ulp). x < -707 (and NaN) give 0:
// such terms (< 1e-307) cannot change a sum that holds a 1. Within 2 ulp of std::exp
// (measured over [-707, 0] by VecMath.ExpWithinTwoUlp).
inline double exp_nonpos(double x) {
  const bool tiny = !(x >= -707.0);  // NaN too
  x = tiny ? 0.0 : x;
  constexpr double kShifter = 0x1.8p52;  // adding it rounds to an integer in the low bits
  const double t = fmadd(x, 0x1.71547652b82fep0, kShifter);  // x / ln2 + shifter
  const double k = t - kShifter;
#if defined(__FMA__)
  double r = fmadd(k, -0x1.62e42fefa39efp-1, x);  // x - k ln2, ln2 split in two parts
  r = fmadd(k, -0x1.abc9e3b39803fp-56, r);
#else
  // Without a fused multiply-add, k * ln2_hi must be exact: this ln2_hi keeps 32
  // significant bits, so the product of it and |k| <= 1022 fits a double.
  double r = x - k * 0x1.62e42feep-1;
  r = r - k * 0x1.a39ef35793c76p-33;
#endif
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = fmadd(p, r, 1.0 / 479001600.0);
  p = fmadd(p, r, 1.0 / 39916800.0);
  p = fmadd(p, r, 1.0 / 3628800.0);
  p = fmadd(p, r, 1.0 / 362880.0);
  p = fmadd(p, r, 1.0 / 40320.0);
  p = fmadd(p, r, 1.0 / 5040.0);
  p = fmadd(p, r, 1.0 / 720.0);
  p = fmadd(p, r, 1.0 / 120.0);
  p = fmadd(p, r, 1.0 / 24.0);
  p = fmadd(p, r, 1.0 / 6.0);
  p = fmadd(p, r, 0.5);
  p = fmadd(p, r, 1.0);
  p = fmadd(p, r, 1.0);
  // Scale by 2^k: k sits in the low bits of t; add it to p's exponent.
  const std::int64_t ki = std::bit_cast<std::int64_t>(t) - std::bit_cast<std::int64_t>(kShifter);
  const double e = std::bit_cast<double>(std::bit_cast<std::int64_t>(p) + (ki << 52));
  return tiny ? 0.0 : e;
}

// exp(x) for x <= 0 in single precision (degree-7 polynomial after the same reduction):
// within 2 ulp of a float; x < -87 (and NaN) give 0. For log-sum-exps, whose result is
// reported as a float anyway.
inline float expf_nonpos(float x) {
  const bool tiny = !(x >= -87.0f);
  x = tiny ? 0.0f : x;
  constexpr float kShifter = 0x1.8p23f;
  const float t = std::fma(x, 0x1.715476p0f, kShifter);
  const float k = t - kShifter;
  float r = std::fma(k, -0x1.62e4p-1f, x);  // ln2 in two parts: k * hi is exact
  r = std::fma(k, -0x1.7f7d1cp-20f, r);
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const std::int32_t ki = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kShifter);
  const float e = std::bit_cast<float>(std::bit_cast<std::int32_t>(p) + (ki << 23));
  return tiny ? 0.0f : e;
}

// Largest value, NaN ignored; -inf when there is none.
float max_value(std::span<const float> x);
// Smallest value above -inf, NaN ignored; +inf when there is none.
float min_finite_value(std::span<const float> x);
// Both in one pass.
struct MaxMin {
  float max, min_finite;
};
MaxMin max_and_min_finite(std::span<const float> x);
// First index of the largest value (ties: the lowest index), NaN ignored; 0 when every
// value is NaN or x is empty.
std::int64_t first_argmax(std::span<const float> x);
// sum over i of exp(double(x[i]) * scale - shift), for shift >= max(x) * scale.
double sum_exp(std::span<const float> x, double scale, double shift);
// log(sum exp(x[i])): terms in single precision (expf_nonpos), summed in double; within
// 1e-6 of the exact value; -inf when every x is -inf, NaN ignored.
// pool (optional) sums fixed parts in parallel; the result does not depend on it.
double log_sum_exp(std::span<const float> x, ThreadPool *pool = nullptr);

}  // namespace keel::cpu
