// The experts' grouped GEMM over low-bit weights (k_moe_grouped_lowbit.h). One skeleton,
// the format a template parameter (a "tile format": which stored bytes of a row one K step
// of 64 needs, how they are copied, how they decode):
//   per K step of 64 (the last may be 32): A (BM x 64 bf16) and the B tile's stored bytes
//   (128 rows x kRawRow)
//   are cp.async-copied three steps ahead; at its turn the raw stage is decoded by all 256
//   threads into a bf16 [128][72] tile, then the WMMA MMAs of k_moe_gemm_tile.cuh run.
// Nothing of B is read twice by a block and no bf16 copy of it goes through global memory;
// the raw copies of the next two steps are in flight while a step decodes and multiplies.
// Blocks of 34 (Q8_0) or 210 (Q6_K) bytes are not 16-byte aligned: those copy the 4-byte
// words covering the bytes they need, and decode from the word offset. MXFP4 runs
// k_moe_grouped_mxfp4.cu instead (decoded into the MMA's fragments in registers: 1.24x this
// skeleton's speed on gpt-oss-20b, bench/RESULTS.md session 28).
#include <algorithm>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_fp8_decode.cuh"
#include "exec/cuda/k_moe_gemm_tile.cuh"
#include "exec/cuda/k_moe_grouped_lowbit.h"
#include "exec/cuda/k_moe_grouped_mxfp4.h"

namespace keel::cuda {

namespace {

using namespace moe_gemm;

constexpr int kBK = 64;       // K per step
constexpr int kLd = kBK + 8;  // bf16 per smem row of A and of the decoded B (144 bytes)
constexpr int kRows = kBN;    // B rows per tile
constexpr int kUnits = 2;     // decode units per B row (32 values each): 256 threads
static_assert(kRows * kUnits == kThreads, "one decode unit per thread");

// Row n of the tile: its stored bytes and (FP8) its scale-grid row.
struct RowRef {
  const std::uint8_t *w;
  const float *scale;
};

// Copy word c of the aligned 4-byte words covering bytes [p, p + len) to dst + 4 c, if it
// holds any of them (nothing past the word holding the last byte is read).
__device__ __forceinline__ void copy_words(std::uint8_t *dst, const std::uint8_t *p, int len,
                                           int c) {
  const std::uint8_t *a0 = p - (addr_low(p) & 3);
  if (a0 + 4 * c < p + len) cp_async4(dst + 4 * c, a0 + 4 * c);
}

__device__ __forceinline__ void store8(bf16 *dst, const float v[8]) {
  uint4 packed;
  __nv_bfloat162 *p2 = reinterpret_cast<__nv_bfloat162 *>(&packed);
#pragma unroll
  for (int j = 0; j < 4; ++j) p2[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
  *reinterpret_cast<uint4 *>(dst) = packed;
}

__device__ __forceinline__ float f16_at(const std::uint8_t *p) {  // 2-byte aligned
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(p)));
}

// FP8 e4m3: 64 bytes a step (16-byte aligned rows: K % 16 == 0), one scale per 128 columns.
struct Fp8Tile {
  static constexpr int kRawRow = 64, kCopies = 4;
  __device__ static void copy(std::uint8_t *dst, const RowRef &r, int kt, int c, int units) {
    if (c < 2 * units) cp_async16(dst + 16 * c, r.w + 64 * kt + 16 * c);
  }
  __device__ static void decode(const std::uint8_t *raw, const RowRef &r, int kt, int u,
                                bf16 *out) {
    const float s = __ldg(r.scale + (64 * kt) / kFp8ScaleCols);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float f[16];
      fp8::dequantize16<false>(*reinterpret_cast<const uint4 *>(raw + 32 * u + 16 * h), s, f);
      store8(out + 16 * h, f);
      store8(out + 16 * h + 8, f + 8);
    }
  }
};

// Q8_0: two 34-byte blocks a step (f16 d, 32 int8), 2-byte aligned: 18 words.
struct Q8_0Tile {
  static constexpr int kRawRow = 72, kCopies = 18;
  __device__ static void copy(std::uint8_t *dst, const RowRef &r, int kt, int c, int units) {
    copy_words(dst, r.w + 68 * kt, 34 * units, c);
  }
  __device__ static void decode(const std::uint8_t *raw, const RowRef &r, int kt, int u,
                                bf16 *out) {
    const std::uint8_t *b = raw + (addr_low(r.w + 68 * kt) & 3) + 34 * u;
    const float d = f16_at(b);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] = __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(b[2 + 8 * g + e])));
      store8(out + 8 * g, v);
    }
  }
};

// The K-quants' 6-bit scale and min of sub-block j (Q4_K / Q5_K heads, 12 bytes at sc).
__device__ __forceinline__ void kquant_scale_min(const std::uint8_t *sc, int j, int &scv, int &mv) {
  if (j < 4) {
    scv = sc[j] & 63;
    mv = sc[j + 4] & 63;
  } else {
    scv = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
    mv = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// Q4_K (144-byte super-blocks of 256, 16-byte aligned): step kt is elements 64 g.. of
// super-block kt / 4 (g = kt % 4): the 16-byte head and qs bytes 32 g.. (3 x 16 bytes).
// Q5_K (176 bytes) adds the 32 qh bytes (the fifth bits, bit 2 g + s): 5 x 16 bytes.
template <bool kQ5>
struct QxKTile {
  static constexpr int kBytes = kQ5 ? 176 : 144;
  static constexpr int kRawRow = kQ5 ? 80 : 48, kCopies = kRawRow / 16;
  __device__ static const std::uint8_t *block(const RowRef &r, int kt) {
    return r.w + std::int64_t(kt / 4) * kBytes;
  }
  __device__ static void copy(std::uint8_t *dst, const RowRef &r, int kt, int c, int) {
    const std::uint8_t *b = block(r, kt);
    const int qs = kQ5 ? 48 : 16, g = kt % 4;
    // Raw row: head [0, 16), (Q5_K) qh [16, 48), qs of the step after them.
    const std::uint8_t *src = c == 0            ? b
                              : (kQ5 && c <= 2) ? b + 16 * c
                                                : b + qs + 32 * g + 16 * (c - kCopies + 2);
    cp_async16(dst + 16 * c, src);
  }
  __device__ static void decode(const std::uint8_t *raw, const RowRef &, int kt, int u, bf16 *out) {
    const int g = kt % 4, j = 2 * g + u;
    const float d = f16_at(raw), dmin = f16_at(raw + 2);
    int scv, mv;
    kquant_scale_min(raw + 4, j, scv, mv);
    const float dd = __fmul_rn(d, static_cast<float>(scv)),
                mm = __fmul_rn(dmin, static_cast<float>(mv));
    const std::uint8_t *qs = raw + (kQ5 ? 48 : 16);
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int l = 8 * o + e;
        int q = u ? qs[l] >> 4 : qs[l] & 0xF;
        if constexpr (kQ5) q |= ((raw[16 + l] >> j) & 1) << 4;
        v[e] = __fsub_rn(__fmul_rn(dd, static_cast<float>(q)), mm);
      }
      store8(out + 8 * o, v);
    }
  }
};

// Q6_K (210-byte super-blocks, 2-byte aligned): step kt is elements 64 h2.. of the half
// n = h2 / 2 of super-block kt / 4 (h2 = kt % 4): ql bytes 64 n.. (64), qh 128 + 32 n..
// (32), and bytes 192.. (the 16 scales and d): 17 + 9 + 6 words.
struct Q6KTile {
  static constexpr int kBytes = 210, kRawRow = 128, kCopies = 32;
  __device__ static const std::uint8_t *block(const RowRef &r, int kt) {
    return r.w + std::int64_t(kt / 4) * kBytes;
  }
  // The three windows: (source offset in the block, length, first word in the raw row).
  __device__ static void window(int kt, int c, int &off, int &len, int &word) {
    const int n = (kt % 4) / 2;
    if (c < 17) {
      off = 64 * n, len = 64, word = 0;
    } else if (c < 26) {
      off = 128 + 32 * n, len = 32, word = 17;
    } else {
      off = 192, len = 18, word = 26;
    }
  }
  __device__ static void copy(std::uint8_t *dst, const RowRef &r, int kt, int c, int) {
    int off, len, word;
    window(kt, c, off, len, word);
    copy_words(dst + 4 * word, block(r, kt) + off, len, c - word);
  }
  __device__ static void decode(const std::uint8_t *raw, const RowRef &r, int kt, int u,
                                bf16 *out) {
    const std::uint8_t *b = block(r, kt);
    const int n = (kt % 4) / 2, rr = 2 * (kt % 2) + u;  // 32-value run rr of half n
    const std::uint8_t *ql = raw + (addr_low(b + 64 * n) & 3);
    const std::uint8_t *qh = raw + 4 * 17 + (addr_low(b + 128 + 32 * n) & 3);
    const std::uint8_t *tail = raw + 4 * 26 + (addr_low(b + 192) & 3);
    const float d = f16_at(tail + 16);
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const int is = o / 2;  // l / 16
      const float ds =
          __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(tail[8 * n + is + 2 * rr])));
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int l = 8 * o + e;
        const int lo = (rr / 2) ? ql[(rr % 2) * 32 + l] >> 4 : ql[(rr % 2) * 32 + l] & 0xF;
        const int q = (lo | (((qh[l] >> (2 * rr)) & 3) << 4)) - 32;
        v[e] = __fmul_rn(ds, static_cast<float>(q));
      }
      store8(out + 8 * o, v);
    }
  }
};

// The kernel's arguments: up to two parts of rows (FP8's gate | up), each expert's bytes
// at w[p] + e * stride[p], row bytes row_bytes; FP8 scale grids at scales[p] + e * stride[p]
// bytes, block_rows[p] rows a grid row, scale_cols grid columns.
struct Args {
  const std::uint8_t *w[2];
  const float *scales[2];
  std::int64_t stride[2], block_rows[2];
  std::int64_t row_bytes;
  int split;  // rows of part 0 (N for one part)
  int scale_cols;
};

template <int BM, class F>
struct Layout {
  static constexpr std::size_t a = 0;
  static constexpr std::size_t b = a + std::size_t(kStages) * BM * kLd * sizeof(bf16);
  static constexpr std::size_t raw = b + std::size_t(kRows) * kLd * sizeof(bf16);
  static constexpr std::size_t rows = raw + std::size_t(kStages) * kRows * F::kRawRow;
  static constexpr std::size_t bytes = rows + kRows * sizeof(RowRef);
  static_assert(std::size_t(BM) * kCLd * sizeof(float) <= raw, "epilogue staging fits");
  static_assert(raw % 16 == 0 && rows % 16 == 0, "aligned regions");
};

template <int BM, class F>
__global__ void __launch_bounds__(kThreads)
    moe_grouped_lowbit_kernel(const bf16 *__restrict__ A, Args w, int N, int K,
                              const std::int32_t *__restrict__ group, MoeGroupLayout L,
                              bf16 *__restrict__ C) {
  using Lay = Layout<BM, F>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  bf16 *as = reinterpret_cast<bf16 *>(smem + Lay::a);
  bf16 *bs = reinterpret_cast<bf16 *>(smem + Lay::b);
  std::uint8_t *raw = smem + Lay::raw;
  RowRef *rows = reinterpret_cast<RowRef *>(smem + Lay::rows);

  const std::int64_t row0 = std::int64_t(blockIdx.y) * BM;
  const int n0 = blockIdx.x * kBN;
  if (row0 >= group[L.starts() + L.E]) return;
  const std::int64_t e = tile_expert(group, L, row0);
  const int tid = threadIdx.x, warp = tid / 32;
  if (tid < kRows) {
    const int n = min(n0 + tid, N - 1);  // a partial last tile repeats row N - 1, never stored
    const bool p = n >= w.split;         // selects, not indexing: the arguments stay in registers
    const int np = p ? n - w.split : n;
    const std::int64_t stride = p ? w.stride[1] : w.stride[0];
    const float *scales = p ? w.scales[1] : w.scales[0];
    RowRef r;
    r.w = (p ? w.w[1] : w.w[0]) + e * stride + np * w.row_bytes;
    r.scale = scales ? reinterpret_cast<const float *>(
                           reinterpret_cast<const std::uint8_t *>(scales) + e * stride) +
                           (np / (p ? w.block_rows[1] : w.block_rows[0])) * w.scale_cols
                     : nullptr;
    rows[tid] = r;
  }
  __syncthreads();

  // Step kt covers units(kt) of 32 columns: 2, or 1 for a last half step (K % 64 == 32),
  // whose missing half of A is zeroed here and of B by the decode.
  auto units = [&](int kt) { return min(2, (K - kt * kBK) / 32); };
  auto load = [&](int stage, int kt) {
    bf16 *a = as + stage * BM * kLd;
    const int u = units(kt);
    for (int i = tid; i < BM * (kBK / 8); i += kThreads) {
      const int r = i / (kBK / 8), c = (i % (kBK / 8)) * 8;
      if (c < 32 * u)
        cp_async16(a + r * kLd + c, A + (row0 + r) * K + kt * kBK + c);
      else
        *reinterpret_cast<uint4 *>(a + r * kLd + c) = make_uint4(0, 0, 0, 0);
    }
    std::uint8_t *rs = raw + std::size_t(stage) * kRows * F::kRawRow;
    for (int i = tid; i < kRows * F::kCopies; i += kThreads) {
      const int r = i / F::kCopies;
      F::copy(rs + r * F::kRawRow, rows[r], kt, i % F::kCopies, u);
    }
  };

  Acc<BM> acc;
  zero<BM>(acc);
  const int KT = (K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load(s, s);
    cp_async_commit();
  }
  const int dr = tid / kUnits, du = tid % kUnits;  // this thread's decode unit
  const RowRef drow = rows[dr];
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();  // step kt has landed (this thread's copies)
    __syncthreads();               // ... and everyone's; the MMAs of kt - 1 are done: bs and stage
                                   // (kt - 1) % kStages are free
    const int next = kt + kStages - 1;
    if (next < KT) load(next % kStages, next);
    cp_async_commit();
    const int st = kt % kStages;
    if (du < units(kt)) {
      F::decode(raw + (std::size_t(st) * kRows + dr) * F::kRawRow, drow, kt, du,
                bs + dr * kLd + 32 * du);
    } else {
#pragma unroll
      for (int g = 0; g < 4; ++g)
        *reinterpret_cast<uint4 *>(bs + dr * kLd + 32 * du + 8 * g) = make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16)
      mma_k16<BM>(acc, as + st * BM * kLd, kLd, bs, kLd, kk, warp);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are dead: the epilogue reuses their space
  store_tile<BM>(acc, reinterpret_cast<float *>(smem), C, row0, n0, N, warp, tid);
}

template <int BM, class F>
void launch_bm(cudaStream_t s, dim3 grid, const bf16 *A, const Args &a, int N, int K,
               const std::int32_t *group, const MoeGroupLayout &L, bf16 *C) {
  constexpr std::size_t bytes = Layout<BM, F>::bytes;
  auto kernel = moe_grouped_lowbit_kernel<BM, F>;
  KEEL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  kernel<<<grid, kThreads, bytes, s>>>(A, a, N, K, group, L, C);
}

template <class F>
void launch_f(cudaStream_t s, int tile_rows, dim3 grid, const bf16 *A, const Args &a, int N, int K,
              const std::int32_t *group, const MoeGroupLayout &L, bf16 *C) {
  if (tile_rows == 16)
    launch_bm<16, F>(s, grid, A, a, N, K, group, L, C);
  else if (tile_rows == 32)
    launch_bm<32, F>(s, grid, A, a, N, K, group, L, C);
  else
    launch_bm<64, F>(s, grid, A, a, N, K, group, L, C);
}

bool block_format(QuantFormat f) {
  return f == QuantFormat::kMXFP4 || f == QuantFormat::kQ8_0 || f == QuantFormat::kQ4_K ||
         f == QuantFormat::kQ5_K || f == QuantFormat::kQ6_K;
}

}  // namespace

bool moe_grouped_lowbit_supported(const MoeLowbitWeights &W, int N, int K) {
  if (N <= 0 || N % 8 != 0 || K <= 0 || K % 32 != 0) return false;
  if (W.fp8_parts > 0) {
    if (W.fp8_parts > 2) return false;
    std::int64_t rows = 0;
    for (int p = 0; p < W.fp8_parts; ++p) {
      const Fp8Experts &f = W.fp8[p];
      if (f.K != K || f.block_rows <= 0 || !f.w || !f.scales || f.stride % 16 != 0 ||
          reinterpret_cast<std::uintptr_t>(f.w) % 16 != 0 ||
          reinterpret_cast<std::uintptr_t>(f.scales) % 4 != 0 || f.stride != W.fp8[0].stride)
        return false;
      rows += f.N;
    }
    return rows == N;
  }
  if (!block_format(W.format) || !W.w) return false;
  const int elems = quant_block_elems(W.format);
  if (K % elems != 0) return false;
  // 16-byte copies (Q4_K / Q5_K) need 16-byte aligned rows and experts.
  if ((W.format == QuantFormat::kQ4_K || W.format == QuantFormat::kQ5_K) &&
      (W.stride % 16 != 0 || reinterpret_cast<std::uintptr_t>(W.w) % 16 != 0))
    return false;
  return true;
}

void launch_moe_grouped_gemm_lowbit(StreamRef s_ref, const bf16 *A, const MoeLowbitWeights &W,
                                    int N, int K, const std::int32_t *group,
                                    const MoeGroupLayout &layout, bf16 *C, int tile_rows) {
  const cudaStream_t s = s_ref.get("launch_moe_grouped_gemm_lowbit");
  if (!moe_grouped_lowbit_supported(W, N, K))
    throw Error(ErrorCode::kInvalidArgument,
                "launch_moe_grouped_gemm_lowbit: unsupported weights N=" + std::to_string(N) +
                    " K=" + std::to_string(K));
  if (layout.E <= 0 || layout.E > kMoeMaxExperts || !moe_gemm_rows_valid(tile_rows) ||
      layout.rows_cap % tile_rows != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "launch_moe_grouped_gemm_lowbit: rows_cap must be a multiple of the row tile");
  if (layout.rows_cap == 0) return;
  Args a{};
  if (W.fp8_parts > 0) {
    for (int p = 0; p < 2; ++p) {
      const Fp8Experts &f = W.fp8[std::min(p, W.fp8_parts - 1)];
      a.w[p] = static_cast<const std::uint8_t *>(f.w);
      a.scales[p] = f.scales;
      a.stride[p] = static_cast<std::int64_t>(f.stride);
      a.block_rows[p] = f.block_rows;
    }
    a.row_bytes = K;
    a.split = W.fp8_parts == 2 ? static_cast<int>(W.fp8[0].N) : N;
    a.scale_cols = (K + kFp8ScaleCols - 1) / kFp8ScaleCols;
  } else {
    for (int p = 0; p < 2; ++p) {
      a.w[p] = static_cast<const std::uint8_t *>(W.w);
      a.scales[p] = nullptr;
      a.stride[p] = static_cast<std::int64_t>(W.stride);
      a.block_rows[p] = 1;
    }
    a.row_bytes = std::int64_t(K) / quant_block_elems(W.format) * quant_block_bytes(W.format);
    a.split = N;
  }
  const dim3 grid((N + kBN - 1) / kBN, static_cast<unsigned>(layout.rows_cap / tile_rows));
  if (W.fp8_parts > 0) {
    launch_f<Fp8Tile>(s, tile_rows, grid, A, a, N, K, group, layout, C);
  } else {
    switch (W.format) {
      case QuantFormat::kMXFP4:
        moe_mxfp4::launch(s, A, static_cast<const std::uint8_t *>(W.w), W.stride, N, K, group,
                          layout, C, tile_rows);
        break;
      case QuantFormat::kQ8_0:
        launch_f<Q8_0Tile>(s, tile_rows, grid, A, a, N, K, group, layout, C);
        break;
      case QuantFormat::kQ4_K:
        launch_f<QxKTile<false>>(s, tile_rows, grid, A, a, N, K, group, layout, C);
        break;
      case QuantFormat::kQ5_K:
        launch_f<QxKTile<true>>(s, tile_rows, grid, A, a, N, K, group, layout, C);
        break;
      case QuantFormat::kQ6_K:
        launch_f<Q6KTile>(s, tile_rows, grid, A, a, N, K, group, layout, C);
        break;
      default:
        break;
    }
  }
  KEEL_CUDA_CHECK_LAUNCH("moe_grouped_gemm_lowbit");
}

}  // namespace keel::cuda
