#include "formats/gguf.h"

#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace keel {

static_assert(std::endian::native == std::endian::little, "GGUF reader assumes little-endian");

namespace {

constexpr int kMaxArrayDepth = 8;  // deeper nesting is a lying file, not a model
constexpr std::uint32_t kMaxDims = 4;

std::size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool valid_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::kF64); }

struct GgmlTypeInfo {
  std::uint32_t id;
  std::string_view name;
  std::int64_t block_elems;
  std::int64_t block_bytes;
};

// Block sizes of every GGML type, so that unsupported tensors are still bounds-checked.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

const GgmlTypeInfo *ggml_info(std::uint32_t t) {
  for (const auto &i : kGgmlTypes)
    if (i.id == t) return &i;
  return nullptr;
}

template <typename T>
T load(const std::byte *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

std::string_view ggml_type_name(std::uint32_t t) {
  const auto *i = ggml_info(t);
  return i ? i->name : std::string_view("unknown");
}

std::optional<DType> dtype_from_ggml(std::uint32_t t) {
  switch (static_cast<GgmlType>(t)) {
    case GgmlType::kF32:
      return DType::kF32;
    case GgmlType::kF16:
      return DType::kF16;
    case GgmlType::kBF16:
      return DType::kBF16;
    case GgmlType::kQ8_0:
      return DType::kQ8_0;
    case GgmlType::kQ4_0:
      return DType::kQ4_0;
    case GgmlType::kQ4_K:
      return DType::kQ4_K;
    case GgmlType::kQ5_K:
      return DType::kQ5_K;
    case GgmlType::kQ6_K:
      return DType::kQ6_K;
    case GgmlType::kI32:
      return DType::kI32;
    case GgmlType::kI8:
      return DType::kI8;
    case GgmlType::kMXFP4:
      return DType::kMXFP4;
    default:
      return std::nullopt;
  }
}

std::uint32_t ggml_from_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kBF16:
      return 30;
    case DType::kQ8_0:
      return 8;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    case DType::kI32:
      return 26;
    case DType::kI8:
      return 24;
    case DType::kMXFP4:
      return 39;
    case DType::kF8_E4M3:
      throw Error(ErrorCode::kUnsupported, "GGUF has no FP8 e4m3 tensor type");
  }
  return 0;
}

// ---- GgufValue ----

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

namespace {
bool is_signed(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}
// Reads one packed numeric element, widened; signed types sign-extended.
struct Num {
  bool is_float = false;
  bool negative = false;
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0;
};
Num read_num(GgufType t, const std::byte *p) {
  Num n;
  switch (t) {
    case GgufType::kU8:
      n.u = load<std::uint8_t>(p);
      break;
    case GgufType::kBool:
      n.u = load<std::uint8_t>(p) != 0;
      break;
    case GgufType::kI8:
      n.i = load<std::int8_t>(p);
      break;
    case GgufType::kU16:
      n.u = load<std::uint16_t>(p);
      break;
    case GgufType::kI16:
      n.i = load<std::int16_t>(p);
      break;
    case GgufType::kU32:
      n.u = load<std::uint32_t>(p);
      break;
    case GgufType::kI32:
      n.i = load<std::int32_t>(p);
      break;
    case GgufType::kU64:
      n.u = load<std::uint64_t>(p);
      break;
    case GgufType::kI64:
      n.i = load<std::int64_t>(p);
      break;
    case GgufType::kF32:
      n.is_float = true;
      n.f = load<float>(p);
      break;
    case GgufType::kF64:
      n.is_float = true;
      n.f = load<double>(p);
      break;
    default:
      break;
  }
  if (is_signed(t)) {
    n.negative = n.i < 0;
    n.u = static_cast<std::uint64_t>(n.i);
  } else if (!n.is_float) {
    n.i = static_cast<std::int64_t>(n.u);
  }
  return n;
}
std::optional<std::int64_t> num_as_int(GgufType t, const Num &n) {
  if (n.is_float) return std::nullopt;
  if (!is_signed(t) && n.u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return std::nullopt;
  return n.i;
}
}  // namespace

std::optional<std::int64_t> GgufValue::as_int() const {
  if (!is_integer() && type_ != GgufType::kBool) return std::nullopt;
  Num n;
  n.u = bits_;
  n.i = static_cast<std::int64_t>(bits_);
  return num_as_int(type_, n);
}

std::optional<std::uint64_t> GgufValue::as_uint() const {
  if (!is_integer()) return std::nullopt;
  if (is_signed(type_) && static_cast<std::int64_t>(bits_) < 0) return std::nullopt;
  return bits_;
}

std::optional<double> GgufValue::as_double() const {
  if (is_float()) return f64_;
  if (is_integer()) {
    if (is_signed(type_)) return static_cast<double>(static_cast<std::int64_t>(bits_));
    return static_cast<double>(bits_);
  }
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ == GgufType::kBool) return bits_ != 0;
  return std::nullopt;
}

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ == GgufType::kString) return str_;
  return std::nullopt;
}

std::optional<std::vector<std::int64_t>> GgufValue::to_i64() const {
  if (!is_array() || scalar_size(elem_type_) == 0 || elem_type_ == GgufType::kF32 ||
      elem_type_ == GgufType::kF64)
    return std::nullopt;
  std::vector<std::int64_t> out;
  out.reserve(count_);
  const std::size_t es = scalar_size(elem_type_);
  for (std::size_t k = 0; k < count_; ++k) {
    auto v = num_as_int(elem_type_, read_num(elem_type_, raw_ + k * es));
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::optional<std::vector<std::int32_t>> GgufValue::to_i32() const {
  auto wide = to_i64();
  if (!wide) return std::nullopt;
  std::vector<std::int32_t> out;
  out.reserve(wide->size());
  for (auto v : *wide) {
    if (v < std::numeric_limits<std::int32_t>::min() ||
        v > std::numeric_limits<std::int32_t>::max())
      return std::nullopt;
    out.push_back(static_cast<std::int32_t>(v));
  }
  return out;
}

std::optional<std::vector<double>> GgufValue::to_f64() const {
  if (!is_array() || scalar_size(elem_type_) == 0 || elem_type_ == GgufType::kBool)
    return std::nullopt;
  std::vector<double> out;
  out.reserve(count_);
  const std::size_t es = scalar_size(elem_type_);
  for (std::size_t k = 0; k < count_; ++k) {
    const Num n = read_num(elem_type_, raw_ + k * es);
    out.push_back(
        n.is_float ? n.f
                   : (is_signed(elem_type_) ? static_cast<double>(n.i) : static_cast<double>(n.u)));
  }
  return out;
}

std::optional<std::vector<float>> GgufValue::to_f32() const {
  auto d = to_f64();
  if (!d) return std::nullopt;
  return std::vector<float>(d->begin(), d->end());
}

// ---- parser ----

class GgufParser {
 public:
  GgufParser(GgufFile &f, std::span<const std::byte> bytes)
      : f_(f), p_(bytes.data()), size_(bytes.size()) {}

  void parse() {
    need(4, "header magic");
    if (std::memcmp(p_, "GGUF", 4) != 0) fail("bad magic (not a GGUF file)");
    pos_ = 4;
    const std::uint32_t version = u32("version");
    if ((version & 0xffffu) == 0 && version != 0) fail("big-endian GGUF files are not supported");
    if (version == 1) fail("GGUF version 1 is not supported (only 2 and 3)");
    if (version < 2 || version > 3) fail("unknown GGUF version " + std::to_string(version));
    f_.version_ = version;
    const std::uint64_t n_tensors = u64("tensor count");
    const std::uint64_t n_kv = u64("metadata count");
    // Each key/value takes at least 12 bytes (key length + type), each tensor info at
    // least 28 (name length, n_dims, one dim, type, offset): check before reserving.
    if (n_kv > remaining() / 12)
      fail("metadata count " + std::to_string(n_kv) + " exceeds the file");
    if (n_tensors > remaining() / 28)
      fail("tensor count " + std::to_string(n_tensors) + " exceeds the file");

    f_.kv_.reserve(n_kv);
    for (std::uint64_t k = 0; k < n_kv; ++k) {
      std::string key(str("metadata key"));
      const std::uint32_t t = u32("type of " + key);
      if (!valid_type(t)) fail(key + ": unknown value type " + std::to_string(t));
      GgufValue v = value(static_cast<GgufType>(t), key, 0);
      if (!f_.kv_index_.emplace(key, f_.kv_.size()).second) fail(key + ": duplicate key");
      f_.kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const GgufValue *a = f_.find("general.alignment")) {
      auto v = a->as_uint();
      if (!v || *v == 0 || (*v & (*v - 1)) != 0 || *v > (1u << 24))
        fail("general.alignment must be a power of two");
      f_.alignment_ = *v;
    }

    f_.tensors_.reserve(n_tensors);
    for (std::uint64_t k = 0; k < n_tensors; ++k) f_.tensors_.push_back(tensor_info());

    const std::uint64_t align = f_.alignment_;
    const std::uint64_t data = (static_cast<std::uint64_t>(pos_) + align - 1) / align * align;
    f_.data_offset_ = data;
    for (auto &t : f_.tensors_) {
      if (t.offset % align != 0)
        fail(t.name + ": offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment");
      if (data > size_ || t.offset > size_ - data || t.nbytes > size_ - data - t.offset)
        fail(t.name + ": data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
             ") overruns the file (" + std::to_string(size_) + " bytes)");
      t.data = p_ + data + t.offset;
      if (!f_.tensor_index_.emplace(t.name, &t - f_.tensors_.data()).second)
        fail(t.name + ": duplicate tensor name");
    }
  }

 private:
  [[noreturn]] void fail(const std::string &why) const {
    throw Error(ErrorCode::kFormat, f_.origin_ + ": " + why);
  }
  std::size_t remaining() const { return size_ - pos_; }
  void need(std::size_t n, const std::string &what) const {
    if (n > remaining()) fail("truncated at byte " + std::to_string(pos_) + " reading " + what);
  }
  template <typename T>
  T scalar(const std::string &what) {
    need(sizeof(T), what);
    T v = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::uint32_t u32(const std::string &what) { return scalar<std::uint32_t>(what); }
  std::uint64_t u64(const std::string &what) { return scalar<std::uint64_t>(what); }
  std::string_view str(const std::string &what) {
    const std::uint64_t n = u64(what + " length");
    if (n > remaining()) fail(what + ": string length " + std::to_string(n) + " exceeds the file");
    std::string_view s(reinterpret_cast<const char *>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

  GgufValue value(GgufType t, const std::string &key, int depth) {
    GgufValue v;
    v.type_ = t;
    if (t == GgufType::kString) {
      v.str_ = str(key);
    } else if (t == GgufType::kArray) {
      if (depth >= kMaxArrayDepth) fail(key + ": arrays nested too deeply");
      const std::uint32_t et = u32(key + " element type");
      if (!valid_type(et)) fail(key + ": unknown array element type " + std::to_string(et));
      v.elem_type_ = static_cast<GgufType>(et);
      const std::uint64_t n = u64(key + " array length");
      // Smallest encoding of one element: its scalar size, 8 for a string, 12 for an array.
      const std::size_t min_elem = v.elem_type_ == GgufType::kString  ? 8
                                   : v.elem_type_ == GgufType::kArray ? 12
                                                                      : scalar_size(v.elem_type_);
      if (n > remaining() / min_elem)
        fail(key + ": array length " + std::to_string(n) + " exceeds the file");
      v.count_ = n;
      if (v.elem_type_ == GgufType::kString) {
        v.strings_.reserve(n);
        for (std::uint64_t k = 0; k < n; ++k) v.strings_.push_back(str(key));
      } else if (v.elem_type_ == GgufType::kArray) {
        v.arrays_.reserve(n);
        // Each element is itself an array value: element type, length, elements.
        for (std::uint64_t k = 0; k < n; ++k)
          v.arrays_.push_back(value(GgufType::kArray, key, depth + 1));
      } else {
        v.raw_ = p_ + pos_;
        pos_ += n * min_elem;
      }
    } else {
      need(scalar_size(t), key);
      const Num m = read_num(t, p_ + pos_);
      pos_ += scalar_size(t);
      v.bits_ = m.u;
      v.f64_ = m.f;
    }
    return v;
  }

  GgufTensorInfo tensor_info() {
    GgufTensorInfo t;
    t.name = std::string(str("tensor name"));
    const std::uint32_t nd = u32(t.name + " n_dims");
    if (nd == 0 || nd > kMaxDims) fail(t.name + ": bad n_dims " + std::to_string(nd));
    std::int64_t numel = 1;
    for (std::uint32_t d = 0; d < nd; ++d) {
      const std::uint64_t ne = u64(t.name + " dims");
      if (ne > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(t.name + ": dimension too large");
      const auto e = static_cast<std::int64_t>(ne);
      if (e != 0 && numel > (std::int64_t{1} << 62) / e) fail(t.name + ": element count overflows");
      numel *= e;
      t.ne.push_back(e);
    }
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    t.ggml_type = u32(t.name + " type");
    const GgmlTypeInfo *info = ggml_info(t.ggml_type);
    if (!info) fail(t.name + ": unknown tensor type " + std::to_string(t.ggml_type));
    if (t.ne[0] % info->block_elems != 0)
      fail(t.name + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " +
           std::string(info->name) + " block size");
    const std::int64_t blocks = numel / info->block_elems;
    if (blocks > std::numeric_limits<std::int64_t>::max() / info->block_bytes)
      fail(t.name + ": byte size overflows");
    t.nbytes = static_cast<std::size_t>(blocks * info->block_bytes);
    t.dtype = dtype_from_ggml(t.ggml_type);
    t.offset = u64(t.name + " offset");
    return t;
  }

  GgufFile &f_;
  const std::byte *p_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// ---- GgufFile ----

std::unique_ptr<GgufFile> GgufFile::open(const std::filesystem::path &path) {
  auto map = MappedFile::open(path);
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->origin_ = path.string();
  f->map_ = std::move(map);
  GgufParser(*f, f->map_.bytes()).parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const std::byte> bytes,
                                          const std::string &origin) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->origin_ = origin;
  GgufParser(*f, bytes).parse();
  return f;
}

const GgufValue *GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
[[noreturn]] void bad_key(const std::string &origin, std::string_view key, const char *why) {
  throw Error(ErrorCode::kFormat, origin + ": " + std::string(key) + ": " + why);
}
}  // namespace

std::string_view GgufFile::get_string(std::string_view key) const {
  auto v = get_opt_string(key);
  if (!v) bad_key(origin_, key, "missing");
  return *v;
}

std::optional<std::string_view> GgufFile::get_opt_string(std::string_view key) const {
  const GgufValue *v = find(key);
  if (!v) return std::nullopt;
  auto s = v->as_string();
  if (!s) bad_key(origin_, key, "expected a string");
  return s;
}

std::optional<std::int64_t> GgufFile::get_opt_i64(std::string_view key) const {
  const GgufValue *v = find(key);
  if (!v) return std::nullopt;
  auto i = v->as_int();
  if (!i) bad_key(origin_, key, "expected an integer");
  return i;
}

std::int64_t GgufFile::get_i64(std::string_view key) const {
  auto v = get_opt_i64(key);
  if (!v) bad_key(origin_, key, "missing");
  return *v;
}

std::uint64_t GgufFile::get_u64(std::string_view key) const {
  const GgufValue *v = find(key);
  if (!v) bad_key(origin_, key, "missing");
  auto u = v->as_uint();
  if (!u) bad_key(origin_, key, "expected a non-negative integer");
  return *u;
}

std::uint32_t GgufFile::get_u32(std::string_view key) const {
  const std::uint64_t v = get_u64(key);
  if (v > std::numeric_limits<std::uint32_t>::max()) bad_key(origin_, key, "value exceeds u32");
  return static_cast<std::uint32_t>(v);
}

std::optional<double> GgufFile::get_opt_f64(std::string_view key) const {
  const GgufValue *v = find(key);
  if (!v) return std::nullopt;
  auto d = v->as_double();
  if (!d) bad_key(origin_, key, "expected a number");
  return d;
}

double GgufFile::get_f64(std::string_view key) const {
  auto v = get_opt_f64(key);
  if (!v) bad_key(origin_, key, "missing");
  return *v;
}

float GgufFile::get_f32(std::string_view key) const { return static_cast<float>(get_f64(key)); }

std::optional<bool> GgufFile::get_opt_bool(std::string_view key) const {
  const GgufValue *v = find(key);
  if (!v) return std::nullopt;
  auto b = v->as_bool();
  if (!b) bad_key(origin_, key, "expected a bool");
  return b;
}

bool GgufFile::get_bool(std::string_view key) const {
  auto v = get_opt_bool(key);
  if (!v) bad_key(origin_, key, "missing");
  return *v;
}

const GgufValue *GgufFile::get_opt_array(std::string_view key) const {
  const GgufValue *v = find(key);
  if (v && !v->is_array()) bad_key(origin_, key, "expected an array");
  return v;
}

const GgufValue &GgufFile::get_array(std::string_view key) const {
  const GgufValue *v = get_opt_array(key);
  if (!v) bad_key(origin_, key, "missing");
  return *v;
}

const GgufTensorInfo *GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

TensorView GgufFile::view(std::string_view name) const {
  const GgufTensorInfo *t = find_tensor(name);
  if (!t) throw Error(ErrorCode::kNotFound, origin_ + ": no tensor named " + std::string(name));
  return view(*t, origin_);
}

TensorView GgufFile::view(const GgufTensorInfo &t, const std::string &origin) {
  if (!t.dtype)
    throw Error(ErrorCode::kUnsupported, origin + ": " + t.name + ": tensor type " +
                                             std::string(ggml_type_name(t.ggml_type)) +
                                             " is not supported");
  TensorView v;
  v.name = t.name;
  v.dtype = *t.dtype;
  v.shape = t.shape;
  v.data = t.data;
  v.nbytes = t.nbytes;
  return v;
}

}  // namespace keel
