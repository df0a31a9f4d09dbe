// One fuzz input through each format parser. Shared by the libFuzzer harnesses and by
// the unit test that replays the committed corpus (tests/unit/formats). keel::Error is
// the expected answer to bad input; anything else (a crash, another exception, a
// sanitizer report) is a bug.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/model_config.h"
#include "formats/quant.h"
#include "formats/safetensors.h"

namespace keel::fuzz {

inline void gguf_one(const std::uint8_t *data, std::size_t size) {
  try {
    auto f = GgufFile::parse({reinterpret_cast<const std::byte *>(data), size}, "fuzz.gguf");
    // Touch every value the way readers do.
    for (const auto &[key, v] : f->metadata()) {
      (void)v.as_int();
      (void)v.as_double();
      (void)v.as_string();
      if (v.is_array()) {
        (void)v.to_i32();
        (void)v.to_f32();
        for (const auto &s : v.strings()) (void)s.size();
        for (const auto &a : v.arrays()) (void)a.to_i64();
      }
    }
    for (const auto &t : f->tensors()) {
      if (!t.supported()) continue;
      TensorView view = GgufFile::view(t, f->path());
      // Dequantize the first block-row of small tensors: reads must stay inside the file.
      const std::int64_t n = std::min<std::int64_t>(view.cols(), 4096);
      if (n > 0 && n == view.cols() &&
          view.nbytes >= static_cast<std::size_t>(dtype_bytes(view.dtype, n)) &&
          t.dtype != DType::kI32 && t.dtype != DType::kI8) {
        std::vector<float> out(static_cast<std::size_t>(n));
        dequantize_row(view.dtype, view.data, out.data(), n);
      }
    }
    (void)config_from_gguf(*f);
  } catch (const Error &) {
  }
}

inline void safetensors_one(const std::uint8_t *data, std::size_t size) {
  try {
    auto f = SafetensorsFile::parse({reinterpret_cast<const std::byte *>(data), size},
                                    "fuzz.safetensors");
    for (const auto &t : f->tensors()) {
      if (!t.dtype) continue;
      TensorView view = SafetensorsModel::view(t, f->path());
      if (view.nbytes > 0) (void)static_cast<volatile std::byte>(view.data[view.nbytes - 1]);
    }
  } catch (const Error &) {
  }
}

inline void hf_config_one(const std::uint8_t *data, std::size_t size) {
  try {
    (void)parse_hf_config(std::string(reinterpret_cast<const char *>(data), size),
                          "fuzz/config.json");
  } catch (const Error &) {
  }
}

}  // namespace keel::fuzz
