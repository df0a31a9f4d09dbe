#include "exec/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KEEL_LINEAR_AVX2 1
#include <immintrin.h>
#endif

namespace keel::cpu {

namespace {

constexpr int kMaxMR = 4;              // tokens per register tile
constexpr int kMaxNR = 4;              // weight rows per register tile
constexpr std::int64_t kRowTile = 32;  // weight rows kept hot in cache while tokens stream

// ---------------------------------------------------------------- float weights
// A weight loader turns 8 elements of a row into 8 floats.
struct F32Row {
  static float at(const std::byte *r, std::int64_t k) {
    return reinterpret_cast<const float *>(r)[k];
  }
#ifdef KEEL_LINEAR_AVX2
  static __m256 load8(const std::byte *r, std::int64_t k) {
    return _mm256_loadu_ps(reinterpret_cast<const float *>(r) + k);
  }
#endif
};
struct F16Row {
  static float at(const std::byte *r, std::int64_t k) {
    return f16_to_f32(reinterpret_cast<const std::uint16_t *>(r)[k]);
  }
#ifdef KEEL_LINEAR_AVX2
  static __m256 load8(const std::byte *r, std::int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(r + 2 * k)));
  }
#endif
};
struct BF16Row {
  static float at(const std::byte *r, std::int64_t k) {
    return bf16_to_f32(reinterpret_cast<const std::uint16_t *>(r)[k]);
  }
#ifdef KEEL_LINEAR_AVX2
  static __m256 load8(const std::byte *r, std::int64_t k) {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(r + 2 * k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
#endif
};

#ifdef KEEL_LINEAR_AVX2
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#else
inline float hsum8(const float *v) {
  const float a = (v[0] + v[4]) + (v[2] + v[6]);
  const float b = (v[1] + v[5]) + (v[3] + v[7]);
  return a + b;
}
#endif

// out[m * ldo + r] = dot(w[r], x[m]) for an MR x NR tile.
template <class Row, int MR, int NR>
void tile_float(const std::byte *const *w, const float *const *x, std::int64_t K, float *out,
                std::int64_t ldo) {
  const std::int64_t K8 = K / 8 * 8;
#ifdef KEEL_LINEAR_AVX2
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < K8; k += 8) {
    __m256 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = Row::load8(w[r], k);
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_loadu_ps(x[m] + k);
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum8(acc[m][r]);
#else
  float acc[MR][NR][8] = {};
  for (std::int64_t k = 0; k < K8; k += 8)
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r)
        for (int l = 0; l < 8; ++l) acc[m][r][l] += Row::at(w[r], k + l) * x[m][k + l];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum8(acc[m][r]);
#endif
  for (std::int64_t k = K8; k < K; ++k)
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) out[m * ldo + r] += Row::at(w[r], k) * x[m][k];
}

// ---------------------------------------------------------------- integer weights
struct Q8_0Row {
  static constexpr bool kUnsignedNibbles = false;
  static float scale(const std::byte *r, std::int64_t i) {
    return f16_to_f32(reinterpret_cast<const BlockQ8_0 *>(r)[i].d);
  }
  static void values(const std::byte *r, std::int64_t i, std::int8_t *v) {
    std::memcpy(v, reinterpret_cast<const BlockQ8_0 *>(r)[i].qs, 32);
  }
#ifdef KEEL_LINEAR_AVX2
  static __m256i load32(const std::byte *r, std::int64_t i) {
    return _mm256_loadu_si256(
        reinterpret_cast<const __m256i *>(reinterpret_cast<const BlockQ8_0 *>(r)[i].qs));
  }
#endif
};
struct Q4_0Row {
  static constexpr bool kUnsignedNibbles = true;  // load32 gives 0..15; the -8 is applied per block
  static float scale(const std::byte *r, std::int64_t i) {
    return f16_to_f32(reinterpret_cast<const BlockQ4_0 *>(r)[i].d);
  }
  static void values(const std::byte *r, std::int64_t i, std::int8_t *v) {
    const auto &b = reinterpret_cast<const BlockQ4_0 *>(r)[i];
    for (int j = 0; j < 16; ++j) {
      v[j] = static_cast<std::int8_t>((b.qs[j] & 0xF) - 8);
      v[j + 16] = static_cast<std::int8_t>((b.qs[j] >> 4) - 8);
    }
  }
#ifdef KEEL_LINEAR_AVX2
  static __m256i load32(const std::byte *r, std::int64_t i) {
    const __m128i q = _mm_loadu_si128(
        reinterpret_cast<const __m128i *>(reinterpret_cast<const BlockQ4_0 *>(r)[i].qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
#endif
};

#ifdef KEEL_LINEAR_AVX2
// Eight int32 sums of four products each of unsigned a and signed b bytes.
// acc + eight int32 sums of four products each of unsigned a and signed b bytes.
inline __m256i dot_u8s8(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, a, b);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
#endif
}
#endif

template <class Row, int MR, int NR>
void tile_q8(const std::byte *const *w, const BlockQ8Act *const *x, std::int64_t nb, float *out,
             std::int64_t ldo) {
#ifdef KEEL_LINEAR_AVX2
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) {
    __m256i wq[NR], aw[NR];
    float dw[NR];
    for (int r = 0; r < NR; ++r) {
      wq[r] = Row::load32(w[r], i);
      if constexpr (!Row::kUnsignedNibbles) aw[r] = _mm256_sign_epi8(wq[r], wq[r]);
      dw[r] = Row::scale(w[r], i);
    }
    for (int m = 0; m < MR; ++m) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[m][i].qs));
      const float dx = x[m][i].d;
      if constexpr (Row::kUnsignedNibbles) {
        // sum((q - 8) x) = sum(q x) - 8 sum(x), exactly, in the integer accumulator.
        const __m256i init = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-8 * x[m][i].sum));
        for (int r = 0; r < NR; ++r) {
          const __m256i p = dot_u8s8(init, wq[r], xq);
          acc[m][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[m][r]);
        }
      } else {
        for (int r = 0; r < NR; ++r) {
          const __m256i p = dot_u8s8(_mm256_setzero_si256(), aw[r], _mm256_sign_epi8(xq, wq[r]));
          acc[m][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[m][r]);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum8(acc[m][r]);
#else
  float acc[MR][NR] = {};
  std::int8_t wv[NR][32];
  for (std::int64_t i = 0; i < nb; ++i) {
    float dw[NR];
    for (int r = 0; r < NR; ++r) {
      Row::values(w[r], i, wv[r]);
      dw[r] = Row::scale(w[r], i);
    }
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) {
        std::int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += wv[r][j] * x[m][i].qs[j];
        acc[m][r] += static_cast<float>(s) * (dw[r] * x[m][i].d);
      }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = acc[m][r];
#endif
}

// ---------------------------------------------------------------- tiling
// Calls kernel<MR, NR>(w rows, x rows, out) for runtime mr <= kMaxMR, nr <= kMaxNR.
template <template <int, int> class K, int MR>
void dispatch_nr(int nr, const typename K<1, 1>::Args &a) {
  switch (nr) {
    case 1:
      K<MR, 1>::run(a);
      break;
    case 2:
      K<MR, 2>::run(a);
      break;
    case 3:
      K<MR, 3>::run(a);
      break;
    default:
      K<MR, 4>::run(a);
      break;
  }
}
template <template <int, int> class K>
void dispatch(int mr, int nr, const typename K<1, 1>::Args &a) {
  switch (mr) {
    case 1:
      dispatch_nr<K, 1>(nr, a);
      break;
    case 2:
      dispatch_nr<K, 2>(nr, a);
      break;
    case 3:
      dispatch_nr<K, 3>(nr, a);
      break;
    default:
      dispatch_nr<K, 4>(nr, a);
      break;
  }
}

struct FloatArgs {
  const std::byte *const *w;
  const float *const *x;
  std::int64_t K;
  float *out;
  std::int64_t ldo;
};
struct QArgs {
  const std::byte *const *w;
  const BlockQ8Act *const *x;
  std::int64_t nb;
  float *out;
  std::int64_t ldo;
};
template <class Row>
struct FloatK {
  template <int MR, int NR>
  struct K {
    using Args = FloatArgs;
    static void run(const Args &a) { tile_float<Row, MR, NR>(a.w, a.x, a.K, a.out, a.ldo); }
  };
};
template <class Row>
struct QK {
  template <int MR, int NR>
  struct K {
    using Args = QArgs;
    static void run(const Args &a) { tile_q8<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo); }
  };
};

// Runs the rows [n0, n1) of the weight against all T tokens with register tiles.
// `row(n)` gives a pointer to weight row n; `xrow(t)` to token t's activation.
template <template <int, int> class K, class WRow, class XRow, class Args, class MakeArgs>
void run_rows(std::int64_t n0, std::int64_t n1, std::int64_t T, WRow row, XRow xrow, float *y,
              std::int64_t N, MakeArgs make_args) {
  for (std::int64_t t0 = 0; t0 < T; t0 += kMaxMR) {
    const int mr = static_cast<int>(std::min<std::int64_t>(kMaxMR, T - t0));
    decltype(xrow(0)) xs[kMaxMR];
    for (int m = 0; m < mr; ++m) xs[m] = xrow(t0 + m);
    for (std::int64_t n = n0; n < n1; n += kMaxNR) {
      const int nr = static_cast<int>(std::min<std::int64_t>(kMaxNR, n1 - n));
      const std::byte *ws[kMaxNR];
      for (int r = 0; r < nr; ++r) ws[r] = row(n + r);
      dispatch<K>(mr, nr, make_args(ws, xs, y + t0 * N + n, N));
    }
  }
}

}  // namespace

bool uses_q8_activations(DType w) { return w == DType::kQ8_0 || w == DType::kQ4_0; }

void linear(const TensorView &w, const float *x, std::int64_t T, float *y, ThreadPool &pool,
            LinearScratch &scratch) {
  const LinearJob job{&w, y};
  linear_multi(std::span<const LinearJob>(&job, 1), x, T, pool, scratch);
}

void linear_multi(std::span<const LinearJob> jobs, const float *x, std::int64_t T, ThreadPool &pool,
                  LinearScratch &scratch) {
  if (jobs.empty() || T <= 0) return;
  const std::int64_t K = jobs[0].w->shape.size() == 2 ? jobs[0].w->shape[1] : -1;
  bool any_q8 = false, any_dequant = false;
  std::vector<std::int64_t> first_tile(jobs.size() + 1, 0);  // prefix sums of row tiles
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const TensorView &w = *jobs[j].w;
    if (w.shape.size() != 2)
      throw Error(ErrorCode::kFormat, w.name + ": a linear weight must be 2-D");
    const std::int64_t N = w.shape[0];
    if (w.shape[1] != K)
      throw Error(ErrorCode::kInternal,
                  w.name + ": fused linear weights must share their input size");
    if (K % dtype_info(w.dtype).block_elems != 0 ||
        static_cast<std::int64_t>(w.nbytes) < N * dtype_bytes(w.dtype, K))
      throw Error(ErrorCode::kFormat, w.name + ": shape does not match its data");
    any_q8 |= uses_q8_activations(w.dtype);
    any_dequant |= w.dtype == DType::kQ4_K || w.dtype == DType::kQ6_K;
    first_tile[j + 1] = first_tile[j] + (N + kRowTile - 1) / kRowTile;
  }
  const std::int64_t nb = K / 32;
  if (any_q8) {
    scratch.xq.resize(static_cast<std::size_t>(T * nb));
    pool.parallel_for(T, [&](std::int64_t a, std::int64_t b) {
      for (std::int64_t t = a; t < b; ++t)
        quantize_row_q8_act(x + t * K, scratch.xq.data() + t * nb, K);
    });
  }
  if (any_dequant && static_cast<int>(scratch.tiles.size()) < pool.size())
    scratch.tiles.resize(pool.size());

  auto xf = [&](std::int64_t t) { return x + t * K; };
  auto fargs = [&](const std::byte *const *ws, const float *const *xs, float *out,
                   std::int64_t ldo) {
    return FloatArgs{ws, xs, K, out, ldo};
  };
  auto xq = [&](std::int64_t t) -> const BlockQ8Act * { return scratch.xq.data() + t * nb; };
  auto qargs = [&](const std::byte *const *ws, const BlockQ8Act *const *xs, float *out,
                   std::int64_t ldo) {
    return QArgs{ws, xs, nb, out, ldo};
  };

  // Rows [n0, n1) of job j against all tokens.
  auto do_tile = [&](const LinearJob &job, std::int64_t n0, std::int64_t n1, int tid) {
    const TensorView &w = *job.w;
    const std::int64_t N = w.shape[0];
    const DType dt = w.dtype;
    const std::int64_t row_bytes = dtype_bytes(dt, K);
    const std::byte *base = w.data;
    auto row = [&](std::int64_t n) { return base + n * row_bytes; };
    float *y = job.y;
    switch (dt) {
      case DType::kF32:
        run_rows<FloatK<F32Row>::K, decltype(row), decltype(xf), FloatArgs>(n0, n1, T, row, xf, y,
                                                                            N, fargs);
        break;
      case DType::kF16:
        run_rows<FloatK<F16Row>::K, decltype(row), decltype(xf), FloatArgs>(n0, n1, T, row, xf, y,
                                                                            N, fargs);
        break;
      case DType::kBF16:
        run_rows<FloatK<BF16Row>::K, decltype(row), decltype(xf), FloatArgs>(n0, n1, T, row, xf, y,
                                                                             N, fargs);
        break;
      case DType::kQ8_0:
        run_rows<QK<Q8_0Row>::K, decltype(row), decltype(xq), QArgs>(n0, n1, T, row, xq, y, N,
                                                                     qargs);
        break;
      case DType::kQ4_0:
        run_rows<QK<Q4_0Row>::K, decltype(row), decltype(xq), QArgs>(n0, n1, T, row, xq, y, N,
                                                                     qargs);
        break;
      case DType::kQ4_K:
      case DType::kQ6_K: {
        // Dequantize this row tile once, then run it as float32 rows.
        auto &tile = scratch.tiles[tid];
        tile.resize(static_cast<std::size_t>(kRowTile * K));
        for (std::int64_t n = n0; n < n1; ++n)
          dequantize_row(dt, row(n), tile.data() + (n - n0) * K, K);
        auto trow = [&](std::int64_t n) {
          return reinterpret_cast<const std::byte *>(tile.data() + (n - n0) * K);
        };
        run_rows<FloatK<F32Row>::K, decltype(trow), decltype(xf), FloatArgs>(n0, n1, T, trow, xf, y,
                                                                             N, fargs);
        break;
      }
      default:
        throw Error(ErrorCode::kUnsupported,
                    w.name + ": no matmul kernel for dtype " + std::string(dtype_name(dt)));
    }
  };

  // Static split of all jobs' row tiles over the threads: one parallel region.
  const std::int64_t tiles = first_tile.back();
  pool.run([&](int tid, int nth) {
    const std::int64_t a = tiles * tid / nth, b = tiles * (tid + 1) / nth;
    std::size_t j = 0;
    for (std::int64_t g = a; g < b; ++g) {
      while (first_tile[j + 1] <= g) ++j;
      const std::int64_t N = jobs[j].w->shape[0];
      const std::int64_t n0 = (g - first_tile[j]) * kRowTile;
      do_tile(jobs[j], n0, std::min(N, n0 + kRowTile), tid);
    }
  });
}

void linear_reference(const TensorView &w, const float *x, std::int64_t T, float *y) {
  const std::int64_t N = w.shape[0], K = w.shape[1];
  const std::int64_t row_bytes = dtype_bytes(w.dtype, K);
  std::vector<float> wr(K), xr(K);
  std::vector<BlockQ8Act> q(K / 32);
  for (std::int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * K;
    if (uses_q8_activations(w.dtype)) {  // the same rounding of x as linear() applies
      quantize_row_q8_act(xt, q.data(), K);
      for (std::int64_t k = 0; k < K; ++k) xr[k] = q[k / 32].d * q[k / 32].qs[k % 32];
    } else {
      std::copy(xt, xt + K, xr.begin());
    }
    for (std::int64_t n = 0; n < N; ++n) {
      dequantize_row(w.dtype, w.data + n * row_bytes, wr.data(), K);
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += static_cast<double>(wr[k]) * xr[k];
      y[t * N + n] = static_cast<float>(s);
    }
  }
}

}  // namespace keel::cpu
