// GGUF (v2, v3) reader: metadata of every value type, including nested arrays, and
// tensor infos as views into a memory mapping of the file.
//
// Every count, length and offset is checked against the bytes that remain before
// anything is allocated, so a truncated or lying file gives Error(kFormat,
// "<path>: <reason>") and never a crash or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "formats/mapped_file.h"

namespace keel {

enum class GgufType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view gguf_type_name(GgufType t);

// One metadata value. Strings and scalar array elements point into the file's bytes
// (little-endian, possibly unaligned): the GgufFile must outlive its values.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  bool is_string() const { return type_ == GgufType::kString; }
  bool is_integer() const;
  bool is_float() const { return type_ == GgufType::kF32 || type_ == GgufType::kF64; }

  // Scalars. The integer getters accept any integer type whose value fits (writers
  // disagree on u32 vs i32 vs u64); they return nullopt for other types or values.
  std::optional<std::int64_t> as_int() const;
  std::optional<std::uint64_t> as_uint() const;
  std::optional<double> as_double() const;  // floats and integers
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Arrays.
  GgufType elem_type() const { return elem_type_; }
  std::size_t size() const { return count_; }  // element count of an array
  std::string_view string_at(std::size_t i) const { return strings_.at(i); }
  const std::vector<std::string_view> &strings() const { return strings_; }  // string arrays
  const std::vector<GgufValue> &arrays() const { return arrays_; }           // nested arrays
  // Elements of a numeric (or bool) array converted; nullopt when the array holds
  // strings/arrays or a value does not fit the result type.
  std::optional<std::vector<std::int64_t>> to_i64() const;
  std::optional<std::vector<std::int32_t>> to_i32() const;
  std::optional<std::vector<float>> to_f32() const;
  std::optional<std::vector<double>> to_f64() const;

 private:
  friend class GgufParser;
  GgufType type_ = GgufType::kU8;
  // Scalar payload (the value widened).
  std::uint64_t bits_ = 0;
  double f64_ = 0;
  std::string_view str_;
  // Array payload.
  GgufType elem_type_ = GgufType::kU8;
  std::size_t count_ = 0;
  const std::byte *raw_ = nullptr;  // numeric elements, packed
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> arrays_;
};

// GGML's tensor type numbers (ggml.h).
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

std::string_view ggml_type_name(std::uint32_t ggml_type);
// The keel DType of a GGML type, or nullopt when keel cannot compute with it.
std::optional<DType> dtype_from_ggml(std::uint32_t ggml_type);
std::uint32_t ggml_from_dtype(DType t);

struct GgufTensorInfo {
  std::string name;
  std::uint32_t ggml_type = 0;
  std::optional<DType> dtype;       // nullopt: listed but unsupported
  std::vector<std::int64_t> ne;     // GGML order, innermost first
  std::vector<std::int64_t> shape;  // row-major, outermost first (ne reversed)
  std::uint64_t offset = 0;         // from the start of the data section
  const std::byte *data = nullptr;
  std::size_t nbytes = 0;

  bool supported() const { return dtype.has_value(); }
};

class GgufFile {
 public:
  // Maps and parses a file. Errors name the path.
  static std::unique_ptr<GgufFile> open(const std::filesystem::path &path);
  // Parses bytes that the caller keeps alive (tests, fuzzing); `origin` names them.
  static std::unique_ptr<GgufFile> parse(std::span<const std::byte> bytes,
                                         const std::string &origin);

  const std::string &path() const { return origin_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // start of the tensor data

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>> &metadata() const { return kv_; }
  const GgufValue *find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: throw Error(kFormat, "<path>: <key>: ...") when the key is missing
  // or holds another type. The get_opt_* forms return nullopt when missing (and still
  // throw on a wrong type).
  std::string_view get_string(std::string_view key) const;
  std::uint32_t get_u32(std::string_view key) const;
  std::uint64_t get_u64(std::string_view key) const;
  std::int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  double get_f64(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const GgufValue &get_array(std::string_view key) const;
  std::optional<std::string_view> get_opt_string(std::string_view key) const;
  std::optional<std::int64_t> get_opt_i64(std::string_view key) const;
  std::optional<double> get_opt_f64(std::string_view key) const;
  std::optional<bool> get_opt_bool(std::string_view key) const;
  const GgufValue *get_opt_array(std::string_view key) const;

  // Tensors, in file order.
  const std::vector<GgufTensorInfo> &tensors() const { return tensors_; }
  const GgufTensorInfo *find_tensor(std::string_view name) const;
  // A view of a supported tensor; throws kNotFound / kUnsupported naming it.
  TensorView view(std::string_view name) const;
  static TensorView view(const GgufTensorInfo &info, const std::string &origin);

 private:
  friend class GgufParser;
  GgufFile() = default;

  MappedFile map_;  // empty when parsing borrowed bytes
  std::string origin_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, std::size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

}  // namespace keel
