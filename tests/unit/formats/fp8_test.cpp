// FP8 e4m3 weights: the code table against the format's definition, rounding, make-model's
// three scale layouts, and the load errors for scales that are missing, mis-shaped or not
// finite (each names the tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "temp_dir.h"

namespace keel::test {
namespace {

// e4m3fn by its definition: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0
// is subnormal (m / 8 * 2^-6); S.1111.111 is NaN and there are no infinities.
double e4m3_definition(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}

TEST(Fp8, DecodesEveryCodeAsTheFormatDefines) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_definition(c);
    const float got = fp8_e4m3_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
      EXPECT_EQ(std::signbit(got), c >= 128) << c;  // -0 stays negative
    }
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, EncodesToTheNearestCodeTiesToEvenAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(static_cast<std::uint8_t>(c))), c) << c;
  }
  // Every float between two neighbouring codes goes to the nearer; halfway to the even one.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = fp8_e4m3_to_float(static_cast<std::uint8_t>(c)),
                hi = fp8_e4m3_to_float(static_cast<std::uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, lo)), c) << c;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, hi)), c + 1) << c;
    EXPECT_EQ(float_to_fp8_e4m3(mid), c % 2 == 0 ? c : c + 1) << c;
  }
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(NAN), 0x7F);
  EXPECT_THROW(dequantize_row(DType::kF8_E4M3, "\x38", nullptr, 1), Error);  // needs scales
}

MakeModelOptions tiny_fp8(const std::filesystem::path &out, const std::string &scale) {
  MakeModelOptions o;
  o.hidden = 192;  // 1.5 blocks of 128: partial last blocks
  o.intermediate = 320;
  o.heads = 3;
  o.kv_heads = 1;
  o.head_dim = 64;
  o.layers = 1;
  o.dtype = DType::kF8_E4M3;
  o.fp8_scale = scale;
  o.out = out;
  o.threads = 2;
  return o;
}

TEST(Fp8, MakeModelWritesEachScaleLayoutAndTheConfigSaysSo) {
  for (const std::string scale : {"block", "channel", "tensor"}) {
    TempDir dir;
    make_model(tiny_fp8(dir.path(), scale));
    auto w = ModelWeights::open(dir.path());
    ASSERT_TRUE(w->config().fp8) << scale;
    EXPECT_EQ(w->config().fp8->strategy, scale);
    const std::string down = "model.layers.0.mlp.down_proj.weight";  // [192, 320]
    const TensorView &t = w->get(down);
    ASSERT_EQ(t.dtype, DType::kF8_E4M3);
    EXPECT_NE(w->find(down + (scale == "block" ? "_scale_inv" : "_scale")), nullptr);
    const std::vector<float> v = dequantize(t);
    // amax / 448 scales: every block's largest value is within an e4m3 step of amax.
    float amax = 0;
    for (float x : v) amax = std::max(amax, std::fabs(x));
    EXPECT_GT(amax, 0.02f);
    EXPECT_LT(amax, 0.08f);  // std 0.02, |x| < 3.5 std
    if (scale == "block") {
      EXPECT_EQ(t.scale.grid_rows, 2);
      EXPECT_EQ(t.scale.grid_cols, 3);
      // The partial corner block [128, 192) x [256, 320) has its own scale: its largest
      // value encodes as 448 (the code 0x7E or 0xFE).
      float corner = 0;
      for (int r = 128; r < 192; ++r)
        for (int c = 256; c < 320; ++c) corner = std::max(corner, std::fabs(v[r * 320 + c]));
      EXPECT_FLOAT_EQ(corner, 448.0f * t.scale.data[1 * 3 + 2]);
    }
  }
}

// Rewrites model.safetensors of `dir` through `edit` (specs and bytes of every tensor).
using Edit = std::function<void(std::vector<TensorSpec> &, std::vector<std::vector<std::byte>> &)>;
void rewrite(const std::filesystem::path &dir, const Edit &edit) {
  std::vector<TensorSpec> specs;
  std::vector<std::vector<std::byte>> bytes;
  {
    auto f = SafetensorsFile::open(dir / "model.safetensors");
    for (const auto &t : f->tensors()) {
      specs.push_back({t.name, *t.dtype, t.shape});
      bytes.emplace_back(t.data, t.data + t.nbytes);
    }
  }
  edit(specs, bytes);
  SafetensorsWriter out(dir / "model.safetensors", specs);
  for (std::size_t i = 0; i < specs.size(); ++i) out.write(i, 0, bytes[i]);
  out.commit();
}

void expect_load_error(const std::filesystem::path &dir, const std::string &names) {
  try {
    ModelWeights::open(dir);
    FAIL() << "expected a load error naming " << names;
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

std::size_t index_of(const std::vector<TensorSpec> &s, const std::string &name) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i].name == name) return i;
  ADD_FAILURE() << name;
  return 0;
}

TEST(Fp8, LoadErrorsNameTheTensor) {
  const std::string o = "model.layers.0.self_attn.o_proj.weight";
  {  // scale missing
    TempDir dir;
    make_model(tiny_fp8(dir.path(), "block"));
    rewrite(dir.path(), [&](auto &specs, auto &bytes) {
      const auto i = index_of(specs, o + "_scale_inv");
      specs.erase(specs.begin() + i);
      bytes.erase(bytes.begin() + i);
    });
    expect_load_error(dir.path(), o + ": fp8 weight without its scale");
  }
  {  // a grid that is not ceil(192/128) x ceil(192/128)
    TempDir dir;
    make_model(tiny_fp8(dir.path(), "block"));
    rewrite(dir.path(), [&](auto &specs, auto &bytes) {
      const auto i = index_of(specs, o + "_scale_inv");
      specs[i].shape = {1, 4};
      bytes[i].resize(16);
    });
    expect_load_error(dir.path(), o + "_scale_inv: shape [1, 4] fits no fp8 scale layout");
  }
  {  // a scale that is not finite
    TempDir dir;
    make_model(tiny_fp8(dir.path(), "channel"));
    rewrite(dir.path(), [&](auto &specs, auto &bytes) {
      const auto i = index_of(specs, o + "_scale");
      const float inf = INFINITY;
      std::memcpy(bytes[i].data() + 4, &inf, 4);
    });
    expect_load_error(dir.path(), o + "_scale: a scale is not finite");
  }
  {  // the config's block size disagrees with the grids
    TempDir dir;
    make_model(tiny_fp8(dir.path(), "block"));
    std::ifstream in(dir / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["quantization_config"]["weight_block_size"] = {64, 64};
    write_file(dir / "config.json", j.dump());
    expect_load_error(dir.path(), "or 64 x 64 blocks");
  }
  {  // a malformed block size names the field
    TempDir dir;
    make_model(tiny_fp8(dir.path(), "block"));
    std::ifstream in(dir / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["quantization_config"]["weight_block_size"] = {128};
    write_file(dir / "config.json", j.dump());
    expect_load_error(dir.path(), "quantization_config.weight_block_size");
  }
}

TEST(Fp8, ScalesInBf16AndScalarPerTensorScalesLoad) {
  TempDir dir;
  make_model(tiny_fp8(dir.path(), "tensor"));
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  float want = 0;
  rewrite(dir.path(), [&](auto &specs, auto &bytes) {
    const auto i = index_of(specs, q + "_scale");
    std::memcpy(&want, bytes[i].data(), 4);
    specs[i].shape = {};  // a 0-D scalar, as older checkpoints store it
    specs[i].dtype = DType::kBF16;
    std::uint32_t bits;
    std::memcpy(&bits, &want, 4);
    bits &= 0xFFFF0000u;  // exactly representable in bf16
    std::memcpy(&want, &bits, 4);
    const std::uint16_t h = static_cast<std::uint16_t>(bits >> 16);
    bytes[i].resize(2);
    std::memcpy(bytes[i].data(), &h, 2);
  });
  auto w = ModelWeights::open(dir.path());
  const TensorView &t = w->get(q);
  ASSERT_TRUE(t.scale.present());
  EXPECT_EQ(t.scale.data[0], want);
  EXPECT_EQ(t.scale.block_rows, 192);
  EXPECT_EQ(t.scale.block_cols, 192);
}

}  // namespace
}  // namespace keel::test
