#include "formats/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/half.h"
#include "formats/mxfp4.h"

namespace keel {

namespace {

constexpr int kQK = 32;    // Q8_0, Q4_0 block
constexpr int kQKK = 256;  // K-quant super-block

struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[kQK];
};
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[kQK / 2];
};
struct BlockQ4_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQKK / 8];
  std::uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  std::uint8_t ql[kQKK / 2];
  std::uint8_t qh[kQKK / 4];
  std::int8_t scales[kQKK / 16];
  std::uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

int nearest_int(float f) { return static_cast<int>(std::lrintf(f)); }

// The 6-bit scale and min of sub-block j from Q4_K's packed 12 bytes.
void scale_min_k4(int j, const std::uint8_t *q, std::uint8_t &sc, std::uint8_t &m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q8_0(const BlockQ8_0 *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = d * b[i].qs[j];
  }
}

void dequant_q4_0(const BlockQ4_0 *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = d * ((b[i].qs[j] & 0xF) - 8);
      y[i * kQK + j + kQK / 2] = d * ((b[i].qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_k(const BlockQ4_K *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const std::uint8_t *q = b[i].qs;
    for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, q += 32) {
      std::uint8_t sc, m;
      scale_min_k4(is, b[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, b[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

// Q5_K: Q4_K's scales and nibbles plus a fifth bit per element in qh: element l of the
// pair of sub-blocks at 64p takes bit 2p of qh[l] (first sub-block) or 2p + 1 (second).
void dequant_q5_k(const BlockQ5_K *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    const float dmin = f16_to_f32(b[i].dmin);
    const std::uint8_t *q = b[i].qs;
    for (int p = 0; p < 4; ++p, q += 32) {
      std::uint8_t sc, m;
      scale_min_k4(2 * p, b[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(2 * p + 1, b[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * ((q[l] & 0xF) | (((b[i].qh[l] >> (2 * p)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * ((q[l] >> 4) | (((b[i].qh[l] >> (2 * p + 1)) & 1) << 4)) - m2;
    }
  }
}

void dequant_q6_k(const BlockQ6_K *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    const std::uint8_t *ql = b[i].ql;
    const std::uint8_t *qh = b[i].qh;
    const std::int8_t *sc = b[i].scales;
    for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void quant_q8_0(const float *x, BlockQ8_0 *b, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = static_cast<std::int8_t>(std::roundf(x[j] * id));
  }
}

void quant_q4_0(const float *x, BlockQ4_0 *b, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQK) {
    // The signed value of largest magnitude maps to -8, the one extreme code point.
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j] * id + 8.5f)));
      const int x1 =
          std::min(15, static_cast<int>(static_cast<std::int8_t>(x[j + kQK / 2] * id + 8.5f)));
      b[i].qs[j] = static_cast<std::uint8_t>(x0 | (x1 << 4));
    }
  }
}

// Q4_K / Q5_K: per 32-element sub-block an affine map x ~ scale * q - min (q in
// 0..15 or 0..31), the scales and mins then quantized to 6 bits against the
// super-block's d and dmin. Block is BlockQ4_K or BlockQ5_K (same head, Q5_K adds qh).
template <class Block, int kLevels>
void quant_k_affine(const float *x, Block *b, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float *s = x + 32 * j;
      float lo = s[0], hi = s[0];
      for (int l = 1; l < 32; ++l) {
        lo = std::min(lo, s[l]);
        hi = std::max(hi, s[l]);
      }
      lo = std::min(lo, 0.0f);
      scales[j] = (hi - lo) / static_cast<float>(kLevels - 1);
      mins[j] = -lo;
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    std::uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
      ls[j] = static_cast<std::uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
      lm[j] = static_cast<std::uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    }
    std::memset(b[i].scales, 0, sizeof b[i].scales);
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        b[i].scales[j] = ls[j];
        b[i].scales[j + 4] = lm[j];
      } else {
        b[i].scales[j + 4] = static_cast<std::uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
        b[i].scales[j - 4] |= static_cast<std::uint8_t>((ls[j] >> 4) << 6);
        b[i].scales[j] |= static_cast<std::uint8_t>((lm[j] >> 4) << 6);
      }
    }
    b[i].d = f32_to_f16(max_scale / 63.0f);
    b[i].dmin = f32_to_f16(max_min / 63.0f);
    // Quantize against the scales as the decoder will see them (after f16 rounding).
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    std::uint8_t L[kQKK];
    for (int j = 0; j < 8; ++j) {
      std::uint8_t sc, m;
      scale_min_k4(j, b[i].scales, sc, m);
      const float dd = d * sc, dm = dmin * m;
      for (int l = 0; l < 32; ++l) {
        const int q = dd != 0 ? nearest_int((x[32 * j + l] + dm) / dd) : 0;
        L[32 * j + l] = static_cast<std::uint8_t>(std::clamp(q, 0, kLevels - 1));
      }
    }
    std::uint8_t *q = b[i].qs;
    for (int j = 0; j < kQKK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l)
        q[l] = static_cast<std::uint8_t>((L[j + l] & 0xF) | ((L[j + l + 32] & 0xF) << 4));
    if constexpr (kLevels == 32) {
      std::memset(b[i].qh, 0, sizeof b[i].qh);
      for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l)
          b[i].qh[l] |= static_cast<std::uint8_t>(((L[64 * p + l] >> 4) << (2 * p)) |
                                                  ((L[64 * p + 32 + l] >> 4) << (2 * p + 1)));
    }
  }
}

// Q6_K: per 16-element sub-block a signed scale (8 bits against the super-block's d),
// codes q - 32 in -32..31.
void quant_q6_k(const float *x, BlockQ6_K *b, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      // The value of largest magnitude maps to -32 (as Q4_0 does with -8).
      float amax = 0, max = 0;
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * ib + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      scales[ib] = max / -32.0f;
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    std::memset(&b[i], 0, sizeof(BlockQ6_K));
    if (max_abs_scale == 0) continue;
    const float iscale = -128.0f / max_scale;
    b[i].d = f32_to_f16(1.0f / iscale);
    for (int ib = 0; ib < 16; ++ib)
      b[i].scales[ib] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    const float d0 = f16_to_f32(b[i].d);
    std::uint8_t L[kQKK];
    for (int j = 0; j < 16; ++j) {
      const float d = d0 * b[i].scales[j];
      for (int l = 0; l < 16; ++l) {
        const int q = d != 0 ? nearest_int(x[16 * j + l] / d) : 0;
        L[16 * j + l] = static_cast<std::uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    std::uint8_t *ql = b[i].ql;
    std::uint8_t *qh = b[i].qh;
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const std::uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const std::uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<std::uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<std::uint8_t>(q2 | (q4 << 4));
        qh[l] =
            static_cast<std::uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                      ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void check_blocks(DType type, std::int64_t n) {
  const auto info = dtype_info(type);
  if (n < 0 || n % info.block_elems != 0)
    throw Error(ErrorCode::kInvalidArgument, std::string(info.name) + ": " + std::to_string(n) +
                                                 " elements is not a multiple of the block size " +
                                                 std::to_string(info.block_elems));
}

}  // namespace

void dequantize_row(DType type, const void *src, float *dst, std::int64_t n) {
  check_blocks(type, n);
  const auto nb = n / dtype_info(type).block_elems;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto *h = static_cast<const std::uint16_t *>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto *h = static_cast<const std::uint16_t *>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kQ8_0:
      dequant_q8_0(static_cast<const BlockQ8_0 *>(src), dst, nb);
      return;
    case DType::kQ4_0:
      dequant_q4_0(static_cast<const BlockQ4_0 *>(src), dst, nb);
      return;
    case DType::kQ4_K:
      dequant_q4_k(static_cast<const BlockQ4_K *>(src), dst, nb);
      return;
    case DType::kQ5_K:
      dequant_q5_k(static_cast<const BlockQ5_K *>(src), dst, nb);
      return;
    case DType::kQ6_K:
      dequant_q6_k(static_cast<const BlockQ6_K *>(src), dst, nb);
      return;
    case DType::kMXFP4:
      dequantize_mxfp4(static_cast<const std::byte *>(src), dst, n);
      return;
    case DType::kF8_E4M3:
      throw Error(ErrorCode::kUnsupported, "dequantize: fp8 values need their scales");
    case DType::kI32:
    case DType::kI8:
      break;
  }
  throw Error(ErrorCode::kUnsupported,
              "dequantize: " + std::string(dtype_name(type)) + " is not a weight type");
}

void quantize_row(DType type, const float *src, void *dst, std::int64_t n) {
  check_blocks(type, n);
  const auto nb = n / dtype_info(type).block_elems;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto *h = static_cast<std::uint16_t *>(dst);
      for (std::int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto *h = static_cast<std::uint16_t *>(dst);
      for (std::int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      quant_q8_0(src, static_cast<BlockQ8_0 *>(dst), nb);
      return;
    case DType::kQ4_0:
      quant_q4_0(src, static_cast<BlockQ4_0 *>(dst), nb);
      return;
    case DType::kQ4_K:
      quant_k_affine<BlockQ4_K, 16>(src, static_cast<BlockQ4_K *>(dst), nb);
      return;
    case DType::kQ5_K:
      quant_k_affine<BlockQ5_K, 32>(src, static_cast<BlockQ5_K *>(dst), nb);
      return;
    case DType::kQ6_K:
      quant_q6_k(src, static_cast<BlockQ6_K *>(dst), nb);
      return;
    case DType::kMXFP4:
      quantize_mxfp4(src, static_cast<std::byte *>(dst), n);
      return;
    case DType::kF8_E4M3: {  // unscaled: the caller divides by the scale first
      auto *q = static_cast<std::uint8_t *>(dst);
      for (std::int64_t i = 0; i < n; ++i) q[i] = float_to_fp8_e4m3(src[i]);
      return;
    }
    case DType::kI32:
    case DType::kI8:
      break;
  }
  throw Error(ErrorCode::kUnsupported,
              "quantize: " + std::string(dtype_name(type)) + " is not a weight type");
}

float fp8_e4m3_to_float(std::uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  float v;
  if (e == 0xF && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);  // subnormal: m / 8 * 2^-6
  } else {
    v = std::ldexp(static_cast<float>(8 + m), e - 10);  // (1 + m / 8) * 2^(e - 7)
  }
  return (code & 0x80) ? -v : v;
}

std::uint8_t float_to_fp8_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7E;  // saturate (also infinities)
  if (a < 0.015625f) {                  // below 2^-6: subnormal steps of 2^-9
    const int m = static_cast<int>(std::nearbyint(a * 512.0f));
    return sign | static_cast<std::uint8_t>(m);  // m == 8 is the smallest normal, 0x08
  }
  // Round the f32 mantissa to 3 bits, ties to even, on the bits: a carry out of the
  // mantissa moves the exponent up by itself.
  std::uint32_t bits;
  std::memcpy(&bits, &a, 4);
  bits += 0x7FFFFu + ((bits >> 20) & 1u);
  const int e = static_cast<int>(bits >> 23) - 127 + 7, m = static_cast<int>((bits >> 20) & 7u);
  if (e > 15 || (e == 15 && m == 7)) return sign | 0x7E;
  return sign | static_cast<std::uint8_t>(e << 3 | m);
}

void dequantize_fp8_row(const std::uint8_t *src, float *dst, std::int64_t n, const float *scales,
                        std::int64_t block_cols) {
  for (std::int64_t k0 = 0, b = 0; k0 < n; k0 += block_cols, ++b) {
    const std::int64_t k1 = std::min(n, k0 + block_cols);
    const float s = scales[b];
    for (std::int64_t k = k0; k < k1; ++k) dst[k] = fp8_e4m3_to_float(src[k]) * s;
  }
}

void dequantize_rows(const TensorView &t, std::int64_t row0, std::int64_t rows, float *dst) {
  const std::int64_t cols = t.cols();
  if (row0 < 0 || rows < 0 || row0 + rows > t.rows())
    throw Error(ErrorCode::kInvalidArgument, t.name + ": rows out of range");
  if (t.dtype != DType::kF8_E4M3) {
    const std::int64_t row_bytes = dtype_bytes(t.dtype, cols);
    dequantize_row(t.dtype, t.data + row0 * row_bytes, dst, rows * cols);
    return;
  }
  const TensorScale &s = t.scale;
  if (!s.present() || s.block_rows <= 0 || s.block_cols <= 0 ||
      s.grid_rows * s.block_rows < t.rows() || s.grid_cols * s.block_cols < cols)
    throw Error(ErrorCode::kFormat, t.name + ": fp8 weight without valid scales");
  const auto *q = reinterpret_cast<const std::uint8_t *>(t.data);
  for (std::int64_t r = row0; r < row0 + rows; ++r)
    dequantize_fp8_row(q + r * cols, dst + (r - row0) * cols, cols, s.row(r), s.block_cols);
}

std::vector<float> dequantize(const TensorView &t) {
  const std::int64_t n = t.numel();
  if (static_cast<std::size_t>(dtype_bytes(t.dtype, n)) != t.nbytes)
    throw Error(ErrorCode::kInvalidArgument, t.name + ": byte size does not match its shape");
  std::vector<float> out(static_cast<std::size_t>(n));
  if (t.dtype == DType::kF8_E4M3)
    dequantize_rows(t, 0, t.rows(), out.data());
  else
    dequantize_row(t.dtype, t.data, out.data(), n);
  return out;
}

}  // namespace keel
