#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "byte_builder.h"
#include "core/error.h"
#include "support/paths.h"

namespace keel {
namespace {

using test::ByteBuilder;

// A v3 header followed by the given metadata and tensor-info bytes.
ByteBuilder header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
  ByteBuilder b;
  b.raw("GGUF").put<std::uint32_t>(version).put<std::uint64_t>(n_tensors).put<std::uint64_t>(n_kv);
  return b;
}

std::string error_of(const ByteBuilder &b) {
  try {
    GgufFile::parse(b.span(), "mem.gguf");
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    return e.what();
  }
  return "";
}

TEST(Gguf, AllValueTypesAndNestedArrays) {
  auto b = header(0, 9);
  b.gstr("u8").put<std::uint32_t>(0).put<std::uint8_t>(200);
  b.gstr("i16").put<std::uint32_t>(3).put<std::int16_t>(-300);
  b.gstr("u32").put<std::uint32_t>(4).put<std::uint32_t>(4000000000u);
  b.gstr("f32").put<std::uint32_t>(6).put<float>(0.5f);
  b.gstr("bool").put<std::uint32_t>(7).put<std::uint8_t>(1);
  b.gstr("str").put<std::uint32_t>(8).gstr("héllo");
  b.gstr("i64").put<std::uint32_t>(11).put<std::int64_t>(-5);
  b.gstr("f64arr")
      .put<std::uint32_t>(9)
      .put<std::uint32_t>(12)
      .put<std::uint64_t>(2)
      .put<double>(1.25)
      .put<double>(-2.0);
  // [[1, 2], ["a"]]: an array of arrays, each with its own element type.
  b.gstr("nested").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(2);
  b.put<std::uint32_t>(5).put<std::uint64_t>(2).put<std::int32_t>(1).put<std::int32_t>(2);
  b.put<std::uint32_t>(8).put<std::uint64_t>(1).gstr("a");

  auto f = GgufFile::parse(b.span(), "mem.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 9u);
  EXPECT_EQ(f->get_u32("u8"), 200u);
  EXPECT_EQ(f->get_i64("i16"), -300);
  EXPECT_THROW(f->get_u64("i16"), Error);  // negative
  EXPECT_EQ(f->get_u32("u32"), 4000000000u);
  EXPECT_FLOAT_EQ(f->get_f32("f32"), 0.5f);
  EXPECT_TRUE(f->get_bool("bool"));
  EXPECT_EQ(f->get_string("str"), "héllo");
  EXPECT_EQ(f->get_i64("i64"), -5);
  EXPECT_EQ(*f->get_array("f64arr").to_f64(), (std::vector<double>{1.25, -2.0}));
  const auto &nested = f->get_array("nested");
  ASSERT_EQ(nested.arrays().size(), 2u);
  EXPECT_EQ(*nested.arrays()[0].to_i32(), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(nested.arrays()[1].string_at(0), "a");
  EXPECT_FALSE(f->has("missing"));
  EXPECT_THROW(f->get_string("u8"), Error);
  try {
    f->get_string("missing");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("mem.gguf: missing"), std::string::npos) << e.what();
  }
}

TEST(Gguf, TensorsReverseShapeAndHonourAlignment) {
  auto b = header(2, 1);
  b.gstr("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(64);
  // a: F32 ne = [3, 2] -> shape [2, 3]; b: Q8_0 ne = [32] at offset 64.
  b.gstr("a")
      .put<std::uint32_t>(2)
      .put<std::int64_t>(3)
      .put<std::int64_t>(2)
      .put<std::uint32_t>(0)
      .put<std::uint64_t>(0);
  b.gstr("b").put<std::uint32_t>(1).put<std::int64_t>(32).put<std::uint32_t>(8).put<std::uint64_t>(
      64);
  b.pad_to(64);
  const std::size_t data = b.bytes.size();
  for (int i = 0; i < 6; ++i) b.put<float>(static_cast<float>(i));
  b.pad_to(64);
  b.bytes.append(34, '\x01');

  auto f = GgufFile::parse(b.span(), "mem.gguf");
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset(), data);
  auto a = f->view("a");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.nbytes, 24u);
  EXPECT_EQ(reinterpret_cast<const float *>(a.data)[5], 5.0f);
  auto q = f->view("b");
  EXPECT_EQ(q.dtype, DType::kQ8_0);
  EXPECT_EQ(q.nbytes, 34u);
  EXPECT_EQ(q.data, a.data + 64);
}

TEST(Gguf, UnsupportedTensorTypeIsListedButNotViewable) {
  auto b = header(1, 0);
  b.gstr("q3")
      .put<std::uint32_t>(1)
      .put<std::int64_t>(256)
      .put<std::uint32_t>(11)
      .put<std::uint64_t>(0);
  b.pad_to(32);
  b.bytes.append(110, '\0');
  auto f = GgufFile::parse(b.span(), "mem.gguf");
  ASSERT_EQ(f->tensors().size(), 1u);
  EXPECT_FALSE(f->tensors()[0].supported());
  try {
    f->view("q3");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Q3_K"), std::string::npos) << e.what();
  }
}

TEST(Gguf, Q5KTensorsAreViewableAndRowsMustBeWholeBlocks) {
  auto b = header(1, 0);
  b.gstr("blk.0.ffn_down.weight")
      .put<std::uint32_t>(2)
      .put<std::int64_t>(256)
      .put<std::int64_t>(2)
      .put<std::uint32_t>(13)
      .put<std::uint64_t>(0);
  b.pad_to(32);
  b.bytes.append(2 * 176, '\0');
  auto f = GgufFile::parse(b.span(), "mem.gguf");
  const TensorView v = f->view("blk.0.ffn_down.weight");
  EXPECT_EQ(v.dtype, DType::kQ5_K);
  EXPECT_EQ(v.nbytes, 2u * 176);
  // A row of 320 elements is not a whole number of 256-element super-blocks.
  auto c = header(1, 0);
  c.gstr("blk.0.ffn_down.weight")
      .put<std::uint32_t>(2)
      .put<std::int64_t>(320)
      .put<std::int64_t>(2)
      .put<std::uint32_t>(13)
      .put<std::uint64_t>(0);
  c.pad_to(32);
  c.bytes.append(4 * 176, '\0');
  const std::string e = error_of(c);
  EXPECT_NE(e.find("blk.0.ffn_down.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("block size"), std::string::npos) << e;
}

TEST(Gguf, LyingFilesGiveErrorsNamingTheFile) {
  EXPECT_NE(error_of(ByteBuilder{}.raw("GGUX")).find("mem.gguf: bad magic"), std::string::npos);
  EXPECT_NE(error_of(ByteBuilder{}.raw("GG")).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(header(0, 0, 1)).find("version 1"), std::string::npos);
  EXPECT_NE(error_of(header(0, 0, 7)).find("version"), std::string::npos);
  EXPECT_NE(error_of(header(0, 1ull << 60)).find("metadata count"), std::string::npos);
  EXPECT_NE(error_of(header(1ull << 60, 0)).find("tensor count"), std::string::npos);
  {  // A key whose length claims terabytes.
    auto b = header(0, 1);
    b.put<std::uint64_t>(1ull << 40).raw("abcdefghijkl");
    EXPECT_NE(error_of(b).find("exceeds the file"), std::string::npos);
  }
  {  // A string array claiming 2^61 elements.
    auto b = header(0, 1);
    b.gstr("arr").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(1ull << 61);
    b.bytes.append(64, '\0');
    EXPECT_NE(error_of(b).find("arr: array length"), std::string::npos);
  }
  {  // Arrays nested past the limit.
    auto b = header(0, 1);
    b.gstr("deep").put<std::uint32_t>(9);
    for (int i = 0; i < 20; ++i) b.put<std::uint32_t>(9).put<std::uint64_t>(1);
    b.put<std::uint32_t>(0).put<std::uint64_t>(0);
    EXPECT_NE(error_of(b).find("nested too deeply"), std::string::npos);
  }
  {  // Unknown value type.
    auto b = header(0, 1);
    b.gstr("k").put<std::uint32_t>(99);
    EXPECT_NE(error_of(b).find("unknown value type"), std::string::npos);
  }
  {  // A tensor whose data overruns the file.
    auto b = header(1, 0);
    b.gstr("t")
        .put<std::uint32_t>(1)
        .put<std::int64_t>(1000)
        .put<std::uint32_t>(0)
        .put<std::uint64_t>(0);
    b.pad_to(32);
    b.bytes.append(100, '\0');
    EXPECT_NE(error_of(b).find("t: data"), std::string::npos);
  }
  {  // An offset near 2^64 must not wrap around.
    auto b = header(1, 0);
    b.gstr("t").put<std::uint32_t>(1).put<std::int64_t>(4).put<std::uint32_t>(0).put<std::uint64_t>(
        ~std::uint64_t{31});
    b.pad_to(32);
    EXPECT_NE(error_of(b).find("overruns"), std::string::npos);
  }
  {  // Dimensions whose product overflows.
    auto b = header(1, 0);
    b.gstr("t")
        .put<std::uint32_t>(3)
        .put<std::int64_t>(1ll << 40)
        .put<std::int64_t>(1ll << 40)
        .put<std::int64_t>(1ll << 40)
        .put<std::uint32_t>(0)
        .put<std::uint64_t>(0);
    EXPECT_NE(error_of(b).find("overflows"), std::string::npos);
  }
  {  // Too many dims, bad block multiple, unknown type.
    auto b = header(1, 0);
    b.gstr("t").put<std::uint32_t>(9);
    b.bytes.append(64, '\0');
    EXPECT_NE(error_of(b).find("n_dims"), std::string::npos);
    auto c = header(1, 0);
    c.gstr("t")
        .put<std::uint32_t>(1)
        .put<std::int64_t>(33)
        .put<std::uint32_t>(8)
        .put<std::uint64_t>(0);
    EXPECT_NE(error_of(c).find("block size"), std::string::npos);
    auto d = header(1, 0);
    d.gstr("t")
        .put<std::uint32_t>(1)
        .put<std::int64_t>(1)
        .put<std::uint32_t>(77)
        .put<std::uint64_t>(0);
    EXPECT_NE(error_of(d).find("unknown tensor type"), std::string::npos);
  }
  {  // Bad alignment.
    auto b = header(0, 1);
    b.gstr("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(48);
    EXPECT_NE(error_of(b).find("power of two"), std::string::npos);
  }
  {  // Duplicate keys.
    auto b = header(0, 2);
    b.gstr("k").put<std::uint32_t>(0).put<std::uint8_t>(1);
    b.gstr("k").put<std::uint32_t>(0).put<std::uint8_t>(1);
    EXPECT_NE(error_of(b).find("duplicate"), std::string::npos);
  }
}

TEST(Gguf, EveryTruncationOfAValidFileIsAnError) {
  auto b = header(1, 2);
  b.gstr("general.architecture").put<std::uint32_t>(8).gstr("llama");
  b.gstr("toks").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(2).gstr("a").gstr(
      "bc");
  b.gstr("t").put<std::uint32_t>(1).put<std::int64_t>(4).put<std::uint32_t>(0).put<std::uint64_t>(
      0);
  b.pad_to(32);
  b.bytes.append(16, '\0');
  ASSERT_NO_THROW(GgufFile::parse(b.span(), "mem.gguf"));
  for (std::size_t n = 0; n < b.bytes.size(); ++n) {
    ByteBuilder cut;
    cut.bytes = b.bytes.substr(0, n);
    EXPECT_THROW(GgufFile::parse(cut.span(), "mem.gguf"), Error) << "length " << n;
  }
}

TEST(Gguf, OpensMissingFileAsNotFound) {
  try {
    GgufFile::open("/nonexistent/x.gguf");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.gguf"), std::string::npos);
  }
}

TEST(Gguf, ReadsRealVocabularyFiles) {
  auto dir = test::testdata_dir();
  if (!dir || !std::filesystem::exists(*dir / "vocab"))
    GTEST_SKIP() << "no ../shared/testdata/vocab";
  int n = 0;
  for (const auto &e : std::filesystem::directory_iterator(*dir / "vocab")) {
    if (e.path().extension() != ".gguf") continue;
    SCOPED_TRACE(e.path().string());
    auto f = GgufFile::open(e.path());
    EXPECT_GE(f->version(), 2u);
    const auto model = f->get_string("tokenizer.ggml.model");
    EXPECT_TRUE(model == "gpt2" || model == "llama" || model == "bert") << model;
    const auto &tokens = f->get_array("tokenizer.ggml.tokens");
    EXPECT_EQ(tokens.elem_type(), GgufType::kString);
    EXPECT_GT(tokens.size(), 1000u);
    EXPECT_EQ(tokens.strings().size(), tokens.size());
    if (const auto *types = f->get_opt_array("tokenizer.ggml.token_type")) {
      EXPECT_EQ(types->size(), tokens.size());
      EXPECT_TRUE(types->to_i32().has_value());
    }
    if (model == "gpt2") {
      const auto &merges = f->get_array("tokenizer.ggml.merges");
      EXPECT_GT(merges.size(), 1000u);
      EXPECT_NE(merges.string_at(0).find(' '), std::string_view::npos);
    }
    ++n;
  }
  EXPECT_GT(n, 5);
}

TEST(Gguf, GptTwoVocabularyHasKnownTokens) {
  auto dir = test::testdata_dir();
  if (!dir || !std::filesystem::exists(*dir / "vocab/ggml-vocab-gpt-2.gguf"))
    GTEST_SKIP() << "no ggml-vocab-gpt-2.gguf";
  auto f = GgufFile::open(*dir / "vocab/ggml-vocab-gpt-2.gguf");
  const auto &tokens = f->get_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.size(), 50257u);
  EXPECT_EQ(tokens.string_at(0), "!");
  EXPECT_EQ(tokens.string_at(50256), "<|endoftext|>");
}

}  // namespace
}  // namespace keel
