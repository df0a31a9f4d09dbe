#include "formats/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "checkpoint_edit.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "temp_dir.h"

namespace keel {
namespace {

using test::open_error;
using test::slurp;

// e2m1 by its definition: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is
// subnormal (0 or 0.5).
double e2m1_definition(int code) {
  const int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return s ? -mag : mag;
}

TEST(Mxfp4, E2m1EveryCode) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(static_cast<std::uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), e2m1_definition(c)) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << "code " << c;  // code 8 is -0
  }
}

TEST(Mxfp4, E8m0EveryCode) {
  for (int e = 0; e < 255; ++e) {
    const float v = e8m0_to_float(static_cast<std::uint8_t>(e));
    EXPECT_EQ(static_cast<double>(v), std::pow(2.0, e - 127)) << "e " << e;
  }
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
}

// Random blocks whose scales stay finite for every code.
std::vector<std::byte> random_blocks(std::int64_t blocks, std::mt19937 &rng) {
  std::vector<std::byte> b(static_cast<std::size_t>(blocks * kMxfp4BlockBytes));
  std::uniform_int_distribution<int> byte(0, 255), scale(100, 140);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<std::byte>(i % kMxfp4BlockBytes == 0 ? scale(rng) : byte(rng));
  return b;
}

TEST(Mxfp4, DequantizeFollowsTheBlockLayout) {
  std::mt19937 rng(7);
  const std::int64_t blocks = 9;
  auto b = random_blocks(blocks, rng);
  b[0] = std::byte{0};   // the subnormal scales
  b[17] = std::byte{1};  // and the largest one whose codes all stay finite
  b[34] = std::byte{254};
  std::vector<float> y(blocks * 32);
  dequantize_row(DType::kMXFP4, b.data(), y.data(), blocks * 32);
  const auto *u = reinterpret_cast<const std::uint8_t *>(b.data());
  for (std::int64_t i = 0; i < blocks; ++i)
    for (int j = 0; j < 32; ++j) {
      const std::uint8_t byte = u[i * 17 + 1 + j % 16];
      const int code = j < 16 ? byte & 0xF : byte >> 4;
      const double want = e2m1_definition(code) * std::pow(2.0, u[i * 17] - 127);
      EXPECT_EQ(static_cast<double>(y[i * 32 + j]), static_cast<double>(static_cast<float>(want)))
          << "block " << i << " element " << j;
    }
  EXPECT_THROW(dequantize_row(DType::kMXFP4, b.data(), y.data(), 40), Error);
}

TEST(Mxfp4, QuantizeRoundsToTheNearestCode) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> x(32 * 64);
  for (auto &v : x) v = nd(rng);
  x[5] = 0.0f;
  std::vector<std::byte> q(static_cast<std::size_t>(dtype_bytes(DType::kMXFP4, x.size())));
  quantize_row(DType::kMXFP4, x.data(), q.data(), static_cast<std::int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(DType::kMXFP4, q.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double err = 0, sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float s = e8m0_to_float(static_cast<std::uint8_t>(q[i / 32 * 17]));
    float amax = 0;
    for (std::size_t k = i / 32 * 32; k < i / 32 * 32 + 32; ++k)
      amax = std::max(amax, std::fabs(x[k]));
    EXPECT_LE(amax, 6 * s) << i;  // the scale covers the block
    EXPECT_GT(amax, 3 * s) << i;  // and is the smallest that does
    // Codes are at most 2 apart (4 -> 6): the nearest is within 1 scale step.
    EXPECT_LE(std::fabs(x[i] - y[i]), s * 1.0f) << i;
    err += (x[i] - y[i]) * (x[i] - y[i]);
    sum += x[i] * x[i];
  }
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_LT(std::sqrt(err / sum), 0.2);
  // Values on the grid come back exactly.
  std::vector<float> g(32);
  for (int j = 0; j < 32; ++j) g[j] = e2m1_to_float(static_cast<std::uint8_t>(j % 16)) * 0.25f;
  std::vector<std::byte> gq(17);
  quantize_row(DType::kMXFP4, g.data(), gq.data(), 32);
  std::vector<float> gy(32);
  dequantize_row(DType::kMXFP4, gq.data(), gy.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(gy[j], g[j]) << j;
}

TEST(Mxfp4, QuantizeBreaksTiesToTheEvenCode) {
  // Scale 1 (max |x| = 6); midpoints between codes go to the code whose mantissa bit is 0.
  const std::vector<std::pair<float, float>> cases = {
      {6.0f, 6.0f}, {0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f},   {1.75f, 2.0f}, {2.5f, 2.0f},
      {3.5f, 4.0f}, {5.0f, 4.0f},  {5.01f, 6.0f}, {-0.75f, -1.0f}, {0.26f, 0.5f}, {-3.0f, -3.0f}};
  std::vector<float> x(32, 0.0f);
  for (std::size_t i = 0; i < cases.size(); ++i) x[i] = cases[i].first;
  std::vector<std::byte> q(17);
  quantize_row(DType::kMXFP4, x.data(), q.data(), 32);
  EXPECT_EQ(static_cast<int>(q[0]), 127);
  std::vector<float> y(32);
  dequantize_row(DType::kMXFP4, q.data(), y.data(), 32);
  for (std::size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(y[i], cases[i].second) << cases[i].first;
}

TEST(Mxfp4, GptOssPairsRepackIntoGgmlBlocks) {
  std::mt19937 rng(11);
  const std::int64_t blocks = 5;
  std::vector<std::uint8_t> nib(blocks * 16), sc(blocks);
  for (auto &v : nib) v = static_cast<std::uint8_t>(rng());
  for (auto &v : sc) v = static_cast<std::uint8_t>(110 + rng() % 30);
  std::vector<std::byte> ggml(blocks * 17);
  repack_gpt_oss_mxfp4(nib.data(), sc.data(), ggml.data(), blocks);
  std::vector<float> y(blocks * 32);
  dequantize_row(DType::kMXFP4, ggml.data(), y.data(), blocks * 32);
  for (std::int64_t i = 0; i < blocks; ++i)
    for (int j = 0; j < 32; ++j) {  // gpt-oss: element 2k in the low nibble of byte k
      const std::uint8_t byte = nib[i * 16 + j / 2];
      const int code = j % 2 ? byte >> 4 : byte & 0xF;
      EXPECT_EQ(y[i * 32 + j],
                e2m1_to_float(static_cast<std::uint8_t>(code)) * e8m0_to_float(sc[i]))
          << i << " " << j;
    }
  std::vector<std::uint8_t> nib2(nib.size()), sc2(sc.size());
  unpack_gpt_oss_mxfp4(ggml.data(), nib2.data(), sc2.data(), blocks);
  EXPECT_EQ(nib2, nib);
  EXPECT_EQ(sc2, sc);
}

MakeModelOptions tiny_mxfp4_moe(const std::filesystem::path &out) {
  MakeModelOptions o;
  o.arch = "qwen3_moe";
  o.shape = "tiny";
  o.dtype = DType::kMXFP4;
  o.seed = 5;
  o.out = out;
  o.threads = 2;
  return o;
}

TEST(Mxfp4, MoeExpertsLoadFromGptOssPairs) {
  test::TempDir dir;
  make_model(tiny_mxfp4_moe(dir.path()));
  auto file = SafetensorsFile::open(dir / "model.safetensors");
  const SafetensorsTensor *blocks = file->find("model.layers.1.mlp.experts.gate_up_proj_blocks");
  const SafetensorsTensor *scales = file->find("model.layers.1.mlp.experts.gate_up_proj_scales");
  ASSERT_TRUE(blocks && scales);
  EXPECT_EQ(blocks->dtype_name, "U8");
  EXPECT_EQ(blocks->shape, (std::vector<std::int64_t>{8, 64, 2, 16}));  // [E, 2I, h / 32, 16]
  EXPECT_EQ(scales->shape, (std::vector<std::int64_t>{8, 64, 2}));
  EXPECT_EQ(file->find("model.layers.0.self_attn.q_proj.weight")->dtype_name, "BF16");

  auto w = ModelWeights::open(dir.path());
  // Expert 3's up rows are rows I .. 2I of its slice of the fused tensor.
  const TensorView &up = w->get("model.layers.1.mlp.experts.3.up_proj.weight");
  EXPECT_EQ(up.dtype, DType::kMXFP4);
  EXPECT_EQ(up.shape, (std::vector<std::int64_t>{32, 64}));
  const std::int64_t row_blocks = 2, first = (3 * 64 + 32) * row_blocks;
  std::vector<std::byte> want(32 * row_blocks * 17);
  repack_gpt_oss_mxfp4(reinterpret_cast<const std::uint8_t *>(blocks->data) + first * 16,
                       reinterpret_cast<const std::uint8_t *>(scales->data) + first, want.data(),
                       32 * row_blocks);
  ASSERT_EQ(up.nbytes, want.size());
  EXPECT_EQ(0, std::memcmp(up.data, want.data(), want.size()));
  const TensorView &down = w->get("model.layers.0.mlp.experts.7.down_proj.weight");
  EXPECT_EQ(down.dtype, DType::kMXFP4);
  EXPECT_EQ(down.shape, (std::vector<std::int64_t>{64, 32}));
  // Random N(0, 0.02) weights survive the round trip roughly.
  const std::vector<float> v = dequantize(down);
  double ss = 0;
  for (float f : v) ss += f * f;
  EXPECT_NEAR(std::sqrt(ss / v.size()), 0.02, 0.006);
}

TEST(Mxfp4, MissingScalesAreNamed) {
  test::TempDir dir;
  make_model(tiny_mxfp4_moe(dir.path()));
  std::string bytes = slurp(dir / "model.safetensors");
  const std::string from = "model.layers.0.mlp.experts.down_proj_scales";
  const auto at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), "model.layers.0.mlp.experts.down_proj_scaleX");
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  const std::string e = open_error(dir.path());
  EXPECT_NE(e.find("model.layers.0.mlp.experts.down_proj_blocks: MXFP4 blocks without their "
                   "scales tensor model.layers.0.mlp.experts.down_proj_scales"),
            std::string::npos)
      << e;
}

TEST(Mxfp4, BlocksThatAreNotOf32AreNamed) {
  test::TempDir dir;
  make_model(tiny_mxfp4_moe(dir.path()));
  // Rewrite one pair with 15-byte blocks (30 elements a scale).
  auto file = SafetensorsFile::open(dir / "model.safetensors");
  std::vector<TensorSpec> specs;
  for (const auto &t : file->tensors()) {
    TensorSpec s{t.name, t.dtype.value_or(DType::kI8), t.shape};
    if (t.dtype_name == "U8") s.st_dtype = "U8";
    if (t.name == "model.layers.1.mlp.experts.down_proj_blocks") s.shape.back() = 15;
    specs.push_back(s);
  }
  {
    SafetensorsWriter out(dir / "bad.safetensors", specs);
    out.commit();
  }
  file.reset();
  std::filesystem::rename(dir / "bad.safetensors", dir / "model.safetensors");
  const std::string e = open_error(dir.path());
  EXPECT_NE(e.find("model.layers.1.mlp.experts.down_proj_blocks: shape [8, 64, 1, 15] does not "
                   "hold blocks of 32"),
            std::string::npos)
      << e;
}

TEST(Mxfp4, GgufRowsThatAreNotBlocksAreNamed) {
  test::TempDir dir;
  GgufMetadata m;
  m.add_string("general.architecture", "llama");
  {
    GgufWriter w(dir / "bad.gguf", m, {{"blk.0.ffn_down.weight", DType::kMXFP4, {2, 40}}});
    w.commit();
  }
  try {
    GgufFile::open(dir / "bad.gguf");
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "blk.0.ffn_down.weight: row length 40 is not a multiple of the MXFP4 block size"),
              std::string::npos)
        << e.what();
  }
}

TEST(Mxfp4, GgufDenseModelKeepsMxfp4Tensors) {
  test::TempDir dir;
  MakeModelOptions o;
  o.arch = "llama";
  o.shape = "tiny";
  o.dtype = DType::kMXFP4;
  o.gguf = true;
  o.out = dir / "m.gguf";
  o.threads = 2;
  make_model(o);
  auto g = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(g->find_tensor("blk.0.attn_q.weight")->ggml_type, 39u);
  EXPECT_EQ(g->find_tensor("blk.1.ffn_down.weight")->ggml_type, 39u);
  EXPECT_EQ(g->find_tensor("output.weight")->ggml_type, 39u);
  EXPECT_EQ(g->find_tensor("token_embd.weight")->ggml_type, 30u);  // bf16
  EXPECT_EQ(g->find_tensor("blk.0.attn_norm.weight")->ggml_type, 0u);
  auto w = ModelWeights::open(dir / "m.gguf");
  EXPECT_EQ(w->get("model.layers.0.mlp.up_proj.weight").dtype, DType::kMXFP4);
  // Dense safetensors MXFP4 is not a released form: refused with the reason.
  o.gguf = false;
  o.out = dir / "st";
  EXPECT_THROW(make_model(o), Error);
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

TEST(Mxfp4, Qwen3MoeGgufStacksMxfp4Experts) {
  test::TempDir dir;
  MakeModelOptions o = tiny_mxfp4_moe(dir / "moe.gguf");
  o.gguf = true;
  make_model(o);
  auto g = GgufFile::open(dir / "moe.gguf");
  EXPECT_EQ(g->get_string("general.architecture"), "qwen3moe");
  const GgufTensorInfo *gate = g->find_tensor("blk.1.ffn_gate_exps.weight");
  ASSERT_TRUE(gate);
  EXPECT_EQ(gate->ggml_type, 39u);
  EXPECT_EQ(gate->shape, (std::vector<std::int64_t>{8, 32, 64}));  // [E, I, h]
  auto w = ModelWeights::open(dir / "moe.gguf");
  ASSERT_TRUE(w->config().moe);
  EXPECT_EQ(w->config().moe->num_experts, 8);
  const TensorView &e5 = w->get("model.layers.1.mlp.experts.5.gate_proj.weight");
  EXPECT_EQ(e5.dtype, DType::kMXFP4);
  EXPECT_EQ(e5.shape, (std::vector<std::int64_t>{32, 64}));
  // Expert 5's slice of the stacked tensor: 5 x 32 rows of 2 blocks in.
  ASSERT_EQ(e5.nbytes, 32u * 2 * 17);
  EXPECT_EQ(0, std::memcmp(e5.data, gate->data + 5 * 32 * 2 * 17, e5.nbytes));
  EXPECT_NE(0, std::memcmp(e5.data, gate->data + 4 * 32 * 2 * 17, e5.nbytes));
  EXPECT_EQ(w->get("model.layers.0.mlp.experts.2.down_proj.weight").shape,
            (std::vector<std::int64_t>{64, 32}));
}

}  // namespace
}  // namespace keel
