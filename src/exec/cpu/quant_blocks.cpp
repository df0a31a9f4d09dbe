#include "exec/cpu/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace keel::cpu {

namespace {

void get_scale_min_k4(int j, const std::uint8_t *q, std::uint8_t &sc, std::uint8_t &m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q4_k(const BlockQ4_K *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, ++b) {
    const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    const std::uint8_t *q = b->qs;
    int is = 0;
    for (int j = 0; j < 256; j += 64) {
      std::uint8_t sc, m;
      get_scale_min_k4(is, b->scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(is + 1, b->scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequant_q6_k(const BlockQ6_K *b, float *y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, ++b) {
    const float d = f16_to_f32(b->d);
    const std::uint8_t *ql = b->ql, *qh = b->qh;
    const std::int8_t *sc = b->scales;
    for (int n = 0; n < 256; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

}  // namespace

void dequantize_row(DType type, const std::byte *src, float *dst, std::int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto *h = reinterpret_cast<const std::uint16_t *>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto *h = reinterpret_cast<const std::uint16_t *>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto *b = reinterpret_cast<const BlockQ8_0 *>(src);
      for (std::int64_t i = 0; i < n / 32; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 32; ++j) dst[i * 32 + j] = d * b[i].qs[j];
      }
      return;
    }
    case DType::kQ4_0: {
      const auto *b = reinterpret_cast<const BlockQ4_0 *>(src);
      for (std::int64_t i = 0; i < n / 32; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; ++j) {
          dst[i * 32 + j] = d * ((b[i].qs[j] & 0xF) - 8);
          dst[i * 32 + j + 16] = d * ((b[i].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_K:
      dequant_q4_k(reinterpret_cast<const BlockQ4_K *>(src), dst, n / 256);
      return;
    case DType::kQ6_K:
      dequant_q6_k(reinterpret_cast<const BlockQ6_K *>(src), dst, n / 256);
      return;
    default:
      throw Error(ErrorCode::kUnsupported, std::string("dequantize_row: no kernel for dtype ") +
                                               std::string(dtype_name(type)));
  }
}

void quantize_row_q8_act(const float *src, BlockQ8Act *dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n / 32; ++i) {
    const float *x = src + i * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[i].d = d;
    std::int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      dst[i].qs[j] = static_cast<std::int8_t>(std::lround(x[j] * id));
      sum += dst[i].qs[j];
    }
    dst[i].sum = sum;
  }
}

}  // namespace keel::cpu
