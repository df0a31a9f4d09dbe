#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "byte_builder.h"
#include "core/error.h"
#include "core/half.h"
#include "temp_dir.h"

namespace keel {
namespace {

using nlohmann::json;
using test::ByteBuilder;

// 8-byte length + header + data.
std::string st_bytes(const json &header, const std::string &data) {
  const std::string h = header.dump();
  ByteBuilder b;
  b.put<std::uint64_t>(h.size()).raw(h).raw(data);
  return b.bytes;
}

std::string parse_error(const std::string &bytes) {
  try {
    SafetensorsFile::parse({reinterpret_cast<const std::byte *>(bytes.data()), bytes.size()},
                           "mem.safetensors");
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    EXPECT_NE(std::string(e.what()).find("mem.safetensors: "), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

TEST(Safetensors, ReadsTensorsZeroCopy) {
  std::string data(4 * 6 + 2 * 4, '\0');
  float f[6] = {0, 1, 2, 3, 4, 5};
  std::memcpy(data.data(), f, 24);
  std::uint16_t h[4] = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), 0, 0};
  std::memcpy(data.data() + 24, h, 8);
  json hdr = {{"__metadata__", {{"format", "pt"}}},
              {"a", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
              {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
              {"c", {{"dtype", "I64"}, {"shape", json::array()}, {"data_offsets", {32, 32 + 0}}}}};
  // "c" is a 0-dim tensor of 8 bytes: give it its bytes.
  hdr["c"]["data_offsets"] = {32, 40};
  data.append(8, '\0');
  const std::string bytes = st_bytes(hdr, data);
  auto file = SafetensorsFile::parse(
      {reinterpret_cast<const std::byte *>(bytes.data()), bytes.size()}, "mem.safetensors");
  ASSERT_EQ(file->tensors().size(), 3u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  const auto *a = file->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(reinterpret_cast<const char *>(a->data), bytes.data() + bytes.size() - data.size());
  EXPECT_EQ(reinterpret_cast<const float *>(a->data)[4], 4.0f);
  auto bv = SafetensorsModel::view(*file->find("b"), "mem");
  EXPECT_EQ(bv.dtype, DType::kBF16);
  EXPECT_EQ(bf16_to_f32(reinterpret_cast<const std::uint16_t *>(bv.data)[1]), -2.0f);
  try {
    SafetensorsModel::view(*file->find("c"), "mem");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos);
  }
}

TEST(Safetensors, LyingHeadersGiveErrors) {
  EXPECT_NE(parse_error("abc").find("truncated"), std::string::npos);
  {
    ByteBuilder b;
    b.put<std::uint64_t>(1ull << 50).raw("{}");
    EXPECT_NE(parse_error(b.bytes).find("absurd"), std::string::npos);
  }
  {
    ByteBuilder b;
    b.put<std::uint64_t>(100).raw("{}");
    EXPECT_NE(parse_error(b.bytes).find("exceeds the file"), std::string::npos);
  }
  {
    ByteBuilder b;
    b.put<std::uint64_t>(3).raw("{x}");
    EXPECT_NE(parse_error(b.bytes).find("not valid JSON"), std::string::npos);
  }
  auto one = [](json entry, std::size_t data_bytes) {
    return parse_error(st_bytes({{"t", entry}}, std::string(data_bytes, '\0')));
  };
  EXPECT_NE(
      one({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}, 8).find("t: data_offsets"),
      std::string::npos);
  EXPECT_NE(
      one({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 12}}}, 16).find("byte size"),
      std::string::npos);
  EXPECT_NE(one({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 0}}}, 16).find("reversed"),
            std::string::npos);
  EXPECT_NE(
      one({{"dtype", "Q9"}, {"shape", {4}}, {"data_offsets", {0, 16}}}, 16).find("unknown dtype"),
      std::string::npos);
  EXPECT_NE(one({{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}, 16).find("shape"),
            std::string::npos);
  EXPECT_NE(
      one({{"dtype", "F32"}, {"shape", {1ull << 40, 1ull << 40}}, {"data_offsets", {0, 16}}}, 16)
          .find("overflows"),
      std::string::npos);
  EXPECT_NE(one({{"dtype", "F32"}, {"shape", {4}}}, 16).find("data_offsets"), std::string::npos);
  EXPECT_NE(one({{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 1ull << 63}}}, 16)
                .find("overrun"),
            std::string::npos);
  {
    json hdr = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
    EXPECT_NE(parse_error(st_bytes(hdr, std::string(16, '\0'))).find("overlaps"),
              std::string::npos);
  }
  EXPECT_NE(parse_error(st_bytes(json::array(), "")).find("not a JSON object"), std::string::npos);
}

TEST(Safetensors, OpensShardedModelThroughIndex) {
  test::TempDir dir;
  std::string d1(16, '\0'), d2(8, '\0');
  float v = 7.0f;
  std::memcpy(d2.data(), &v, 4);
  test::write_file(
      dir / "model-00001-of-00002.safetensors",
      st_bytes({{"x", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}}, d1));
  test::write_file(
      dir / "model-00002-of-00002.safetensors",
      st_bytes({{"y", {{"dtype", "F16"}, {"shape", {2, 2}}, {"data_offsets", {0, 8}}}}}, d2));
  json index = {
      {"metadata", {{"total_size", 24}}},
      {"weight_map",
       {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
  test::write_file(dir / "model.safetensors.index.json", index.dump());
  auto m = SafetensorsModel::open(dir.path());
  EXPECT_EQ(m->files().size(), 2u);
  EXPECT_EQ(m->names(), (std::vector<std::string>{"x", "y"}));
  auto y = m->view("y");
  EXPECT_EQ(y.dtype, DType::kF16);
  EXPECT_EQ(y.shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(std::memcmp(y.data, &v, 4), 0);
  try {
    m->view("z");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("z"), std::string::npos);
  }

  // An index that names a tensor its shard lacks, or a shard outside the directory.
  index["weight_map"]["w"] = "model-00001-of-00002.safetensors";
  test::write_file(dir / "model.safetensors.index.json", index.dump());
  EXPECT_THROW(SafetensorsModel::open(dir.path()), Error);
  index["weight_map"].erase("w");
  index["weight_map"]["x"] = "../etc.safetensors";
  test::write_file(dir / "model.safetensors.index.json", index.dump());
  EXPECT_THROW(SafetensorsModel::open(dir.path()), Error);
}

TEST(Safetensors, TruncatedFileNamesThePath) {
  test::TempDir dir;
  const std::string full =
      st_bytes({{"x", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}},
               std::string(16, '\0'));
  test::write_file(dir / "model.safetensors", full.substr(0, full.size() - 4));
  try {
    SafetensorsModel::open(dir.path());
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find((dir / "model.safetensors").string()), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace keel
