// GCC 12 reports its own _mm512_undefined_* helpers as uninitialized when they are inlined
// into target("avx512f") functions; the pragma must precede <immintrin.h>'s first inclusion.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "exec/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"
#include "exec/cpu/fp8_row.h"
#include "exec/cpu/kquant_rows.h"
#include "exec/cpu/linear_tiles.h"
#include "exec/cpu/mxfp4_rows.h"
#include "formats/quant.h"

namespace keel::cpu {

namespace {

constexpr int kMaxMR = 4;              // tokens per register tile
constexpr int kMaxNR = 4;              // weight rows per register tile
constexpr std::int64_t kRowTile = 32;  // weight rows kept hot in cache while tokens stream

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
template <LinearIsa I>
using IsaC = std::integral_constant<LinearIsa, I>;

template <class Row, LinearIsa I>
struct FloatK {
  template <int MR, int NR>
  struct K {
    using Args = FloatArgs;
    static void run(const Args &a) {
#ifdef KEEL_LINEAR_X86
      if constexpr (I == LinearIsa::kAvx512)
        return tiles::float_avx512<Row, MR, NR>(a.w, a.x, a.K, a.out, a.ldo);
      if constexpr (I == LinearIsa::kAvx2)
        return tiles::float_avx2<Row, MR, NR>(a.w, a.x, a.K, a.out, a.ldo);
#endif
      tiles::float_scalar<Row, MR, NR>(a.w, a.x, a.K, a.out, a.ldo);
    }
  };
};
template <class Row, LinearIsa I>
struct QK {
  template <int MR, int NR>
  struct K {
    using Args = QArgs;
    static void run(const Args &a) {
#ifdef KEEL_LINEAR_X86
      if constexpr (I == LinearIsa::kAvx512)
        return tiles::q8_avx512_by8<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
      if constexpr (I == LinearIsa::kAvx2)
        return tiles::q8_avx2<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
#endif
      tiles::q8_scalar<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
    }
  };
};

template <LinearIsa I>
struct MxK {  // MXFP4 rows (mxfp4_rows.h) against 8-bit activations
  template <int MR, int NR>
  struct K {
    using Args = QArgs;
    static void run(const Args &a) {
#ifdef KEEL_LINEAR_X86
      if constexpr (I == LinearIsa::kAvx512)
        return tiles::mxfp4_avx512<MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
      if constexpr (I == LinearIsa::kAvx2)
        return tiles::mxfp4_avx2<MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
#endif
      tiles::mxfp4_scalar<MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
    }
  };
};

template <class Row, LinearIsa I>
struct KQK {  // Q4_K / Q5_K / Q6_K rows (kquant_rows.h) against 8-bit activations
  template <int MR, int NR>
  struct K {
    using Args = QArgs;
    static void run(const Args &a) {
#ifdef KEEL_LINEAR_X86
      if constexpr (I == LinearIsa::kAvx512)
        return tiles::kquant_avx512<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
      if constexpr (I == LinearIsa::kAvx2)
        return tiles::kquant_avx2<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
#endif
      tiles::kquant_scalar<Row, MR, NR>(a.w, a.x, a.nb, a.out, a.ldo);
    }
  };
};

// Where a row tile's results go: (token t, row n) at y[t * ldy + n - n_first].
struct TileOut {
  float *y;
  std::int64_t ldy, n_first;
};

// Runs the rows [n0, n1) of the weight against all T tokens with register tiles.
// `row(n)` gives a pointer to weight row n; `xrow(t)` to token t's activation.
template <template <int, int> class K, class WRow, class XRow, class Args, class MakeArgs>
void run_rows(std::int64_t n0, std::int64_t n1, std::int64_t T, WRow row, XRow xrow, TileOut o,
              MakeArgs make_args) {
  for (std::int64_t t0 = 0; t0 < T; t0 += kMaxMR) {
    const int mr = static_cast<int>(std::min<std::int64_t>(kMaxMR, T - t0));
    decltype(xrow(0)) xs[kMaxMR];
    for (int m = 0; m < mr; ++m) xs[m] = xrow(t0 + m);
    for (std::int64_t n = n0; n < n1; n += kMaxNR) {
      const int nr = static_cast<int>(std::min<std::int64_t>(kMaxNR, n1 - n));
      const std::byte *ws[kMaxNR];
      for (int r = 0; r < nr; ++r) ws[r] = row(n + r);
      dispatch<K>(mr, nr, make_args(ws, xs, o.y + t0 * o.ldy + (n - o.n_first), o.ldy));
    }
  }
}

}  // namespace

LinearIsa best_linear_isa() {
#ifdef KEEL_LINEAR_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni"))
    return LinearIsa::kAvx512;
  // Every CPU with AVX2 and FMA has F16C (and clang 14 cannot ask for "f16c" here).
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return LinearIsa::kAvx2;
#endif
  return LinearIsa::kPortable;
}

const char *linear_isa_name(LinearIsa isa) {
  switch (isa) {
    case LinearIsa::kAvx512:
      return "avx512";
    case LinearIsa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool uses_q8_activations(DType w) {
  return w == DType::kQ8_0 || w == DType::kQ4_0 || w == DType::kMXFP4 || w == DType::kQ4_K ||
         w == DType::kQ5_K || w == DType::kQ6_K;
}

void linear(const TensorView &w, const float *x, std::int64_t T, float *y, ThreadPool &pool,
            LinearScratch &scratch) {
  const LinearJob job{&w, y};
  linear_multi(std::span<const LinearJob>(&job, 1), x, T, pool, scratch);
}

namespace {

// The linear layer's one parallel region over all jobs' row tiles. `sink.out(j, n0, tid)`
// says where tile (job j, rows from n0) writes (a TileOut), `sink.done(j, n0, n1, tid)` is
// called when it has.
template <class Sink>
void run_linear(std::span<const LinearJob> jobs, const float *x, std::int64_t T, ThreadPool &pool,
                LinearScratch &scratch, Sink &sink) {
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
    any_dequant |= w.dtype == DType::kF8_E4M3;
    if (w.dtype == DType::kF8_E4M3 &&
        (!w.scale.present() || w.scale.grid_rows * w.scale.block_rows < N ||
         w.scale.grid_cols * w.scale.block_cols < K))
      throw Error(ErrorCode::kFormat, w.name + ": fp8 weight without valid scales");
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
  auto do_tile = [&](auto isa, const LinearJob &job, std::int64_t n0, std::int64_t n1, int tid,
                     TileOut o) {
    constexpr LinearIsa I = decltype(isa)::value;
    const TensorView &w = *job.w;
    const DType dt = w.dtype;
    const std::int64_t row_bytes = dtype_bytes(dt, K);
    const std::byte *base = w.data;
    auto row = [&](std::int64_t n) { return base + n * row_bytes; };
    switch (dt) {
      case DType::kF32:
        run_rows<FloatK<tiles::F32Row, I>::template K, decltype(row), decltype(xf), FloatArgs>(
            n0, n1, T, row, xf, o, fargs);
        break;
      case DType::kF16:
        run_rows<FloatK<tiles::F16Row, I>::template K, decltype(row), decltype(xf), FloatArgs>(
            n0, n1, T, row, xf, o, fargs);
        break;
      case DType::kBF16:
        run_rows<FloatK<tiles::BF16Row, I>::template K, decltype(row), decltype(xf), FloatArgs>(
            n0, n1, T, row, xf, o, fargs);
        break;
      case DType::kQ8_0:
        run_rows<QK<tiles::Q8_0Row, I>::template K, decltype(row), decltype(xq), QArgs>(
            n0, n1, T, row, xq, o, qargs);
        break;
      case DType::kQ4_0:
        run_rows<QK<tiles::Q4_0Row, I>::template K, decltype(row), decltype(xq), QArgs>(
            n0, n1, T, row, xq, o, qargs);
        break;
      case DType::kMXFP4:
        run_rows<MxK<I>::template K, decltype(row), decltype(xq), QArgs>(n0, n1, T, row, xq, o,
                                                                         qargs);
        break;
      case DType::kQ4_K:
        run_rows<KQK<tiles::Q4KRow, I>::template K, decltype(row), decltype(xq), QArgs>(
            n0, n1, T, row, xq, o, qargs);
        break;
      case DType::kQ5_K:
        run_rows<KQK<tiles::Q5KRow, I>::template K, decltype(row), decltype(xq), QArgs>(
            n0, n1, T, row, xq, o, qargs);
        break;
      case DType::kQ6_K:
        run_rows<KQK<tiles::Q6KRow, I>::template K, decltype(row), decltype(xq), QArgs>(
            n0, n1, T, row, xq, o, qargs);
        break;
      case DType::kF8_E4M3: {
        // Dequantize rows to float32, then run them as float32 rows: a few rows at a time
        // for a few tokens (the rows stay in L1 instead of a 32-row tile of K floats going
        // through L2), the whole row tile for many tokens (each row is dequantized once).
        // Either way every row goes through the same kernel chain: the same results.
        auto &tile = scratch.tiles[tid];
        tile.resize(static_cast<std::size_t>(kRowTile * K));
        const std::int64_t group = T <= kMaxMR ? kMaxNR : kRowTile;
        for (std::int64_t g0 = n0; g0 < n1; g0 += group) {
          const std::int64_t g1 = std::min(n1, g0 + group);
          for (std::int64_t n = g0; n < g1; ++n)
            fp8_row_to_f32(reinterpret_cast<const std::uint8_t *>(row(n)),
                           tile.data() + (n - g0) * K, K, w.scale.row(n), w.scale.block_cols,
                           I != LinearIsa::kPortable);
          auto trow = [&](std::int64_t n) {
            return reinterpret_cast<const std::byte *>(tile.data() + (n - g0) * K);
          };
          run_rows<FloatK<tiles::F32Row, I>::template K, decltype(trow), decltype(xf), FloatArgs>(
              g0, g1, T, trow, xf, o, fargs);
        }
        break;
      }
      default:
        throw Error(ErrorCode::kUnsupported,
                    w.name + ": no matmul kernel for dtype " + std::string(dtype_name(dt)));
    }
  };

  // A family this CPU lacks (a scratch made for another machine) falls back to portable.
  const LinearIsa isa = scratch.isa <= best_linear_isa() ? scratch.isa : LinearIsa::kPortable;
  // All jobs' row tiles in one parallel region, each tile claimed by whichever thread is
  // free (a thread the OS has not scheduled holds up one tile, not a fixed share); a
  // tile's result does not depend on the thread.
  const std::int64_t tiles = first_tile.back();
  pool.run_chunks(static_cast<int>(tiles), [&](int g, int tid) {
    const std::size_t j = static_cast<std::size_t>(
        std::upper_bound(first_tile.begin(), first_tile.end(), g) - first_tile.begin() - 1);
    const std::int64_t N = jobs[j].w->shape[0];
    const std::int64_t n0 = (g - first_tile[j]) * kRowTile;
    const std::int64_t n1 = std::min(N, n0 + kRowTile);
    const TileOut o = sink.out(j, n0, tid);
    switch (isa) {
#ifdef KEEL_LINEAR_X86
      case LinearIsa::kAvx512:
        do_tile(IsaC<LinearIsa::kAvx512>{}, jobs[j], n0, n1, tid, o);
        break;
      case LinearIsa::kAvx2:
        do_tile(IsaC<LinearIsa::kAvx2>{}, jobs[j], n0, n1, tid, o);
        break;
#endif
      default:
        do_tile(IsaC<LinearIsa::kPortable>{}, jobs[j], n0, n1, tid, o);
        break;
    }
    sink.done(j, n0, n1, tid);
  });
}

// Results straight into each job's y.
struct StoreSink {
  std::span<const LinearJob> jobs;
  TileOut out(std::size_t j, std::int64_t, int) const {
    return TileOut{jobs[j].y, jobs[j].w->shape[0], 0};
  }
  void done(std::size_t, std::int64_t, std::int64_t, int) const {}
};

// Each tile into its thread's buffer, then folded into that thread's best (value, lowest
// id) per token; the threads' bests are merged at the end. Exact comparisons: the same ids
// whichever thread ran which tile.
struct ArgmaxSink {
  std::int64_t T;
  std::vector<std::vector<float>> &buffers;  // per thread: [T, kRowTile]
  std::vector<float> best;                   // [threads, T]
  std::vector<std::int64_t> best_id;         // [threads, T]; N: none yet
  TileOut out(std::size_t, std::int64_t n0, int tid) {
    return TileOut{buffers[tid].data(), kRowTile, n0};
  }
  void done(std::size_t, std::int64_t n0, std::int64_t n1, int tid) {
    const float *buf = buffers[tid].data();
    for (std::int64_t t = 0; t < T; ++t) {
      float &b = best[tid * T + t];
      std::int64_t &id = best_id[tid * T + t];
      for (std::int64_t n = n0; n < n1; ++n) {
        const float v = buf[t * kRowTile + n - n0];
        if (v > b || (v == b && n < id)) b = v, id = n;  // NaN never wins
      }
    }
  }
};

}  // namespace

void linear_multi(std::span<const LinearJob> jobs, const float *x, std::int64_t T, ThreadPool &pool,
                  LinearScratch &scratch) {
  StoreSink sink{jobs};
  run_linear(jobs, x, T, pool, scratch, sink);
}

void linear_argmax(const TensorView &w, const float *x, std::int64_t T, std::int32_t *ids,
                   ThreadPool &pool, LinearScratch &scratch) {
  if (T <= 0) return;
  const std::int64_t N = w.shape.size() == 2 ? w.shape[0] : 0;
  const auto threads = static_cast<std::size_t>(pool.size());
  if (scratch.argmax_tiles.size() < threads) scratch.argmax_tiles.resize(threads);
  for (auto &b : scratch.argmax_tiles) b.resize(static_cast<std::size_t>(T * kRowTile));
  ArgmaxSink sink{T, scratch.argmax_tiles,
                  std::vector<float>(threads * T, -std::numeric_limits<float>::infinity()),
                  std::vector<std::int64_t>(threads * T, N)};
  const LinearJob job{&w, nullptr};
  run_linear(std::span<const LinearJob>(&job, 1), x, T, pool, scratch, sink);
  for (std::int64_t t = 0; t < T; ++t) {
    float b = -std::numeric_limits<float>::infinity();
    std::int64_t id = N;
    for (std::size_t th = 0; th < threads; ++th) {
      const float v = sink.best[th * T + t];
      const std::int64_t n = sink.best_id[th * T + t];
      if (n < N && (v > b || (v == b && n < id))) b = v, id = n;
    }
    ids[t] = static_cast<std::int32_t>(id < N ? id : 0);  // all NaN: 0, as first_argmax
  }
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
      if (w.dtype == DType::kF8_E4M3)
        keel::dequantize_rows(w, n, 1, wr.data());
      else
        dequantize_row(w.dtype, w.data + n * row_bytes, wr.data(), K);
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += static_cast<double>(wr[k]) * xr[k];
      y[t * N + n] = static_cast<float>(s);
    }
  }
}

}  // namespace keel::cpu
