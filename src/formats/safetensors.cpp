#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace keel {

namespace {

using nlohmann::json;

// HF's own reader refuses headers above 100 MB; a bigger one is a lying file.
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;

struct StDType {
  std::string_view name;
  std::size_t size;
  std::optional<DType> dtype;
};

constexpr StDType kStDTypes[] = {
    {"F32", 4, DType::kF32},   {"F16", 2, DType::kF16},         {"BF16", 2, DType::kBF16},
    {"I32", 4, DType::kI32},   {"I8", 1, DType::kI8},           {"F64", 8, std::nullopt},
    {"I64", 8, std::nullopt},  {"I16", 2, std::nullopt},        {"U8", 1, std::nullopt},
    {"U16", 2, std::nullopt},  {"U32", 4, std::nullopt},        {"U64", 8, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, DType::kF8_E4M3}, {"F8_E5M2", 1, std::nullopt},
};

const StDType *st_dtype(std::string_view name) {
  for (const auto &d : kStDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  for (const auto &d : kStDTypes)
    if (d.dtype == t) return d.name;
  return "";
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path &path) {
  auto map = MappedFile::open(path);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->origin_ = path.string();
  f->map_ = std::move(map);
  f->parse_bytes(f->map_.bytes());
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(std::span<const std::byte> bytes,
                                                        const std::string &origin) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->origin_ = origin;
  f->parse_bytes(bytes);
  return f;
}

void SafetensorsFile::parse_bytes(std::span<const std::byte> bytes) {
  auto fail = [&](const std::string &why) {
    throw Error(ErrorCode::kFormat, origin_ + ": " + why);
  };
  if (bytes.size() < 8) fail("truncated: no header length");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " is absurd");
  if (n > bytes.size() - 8)
    fail("header length " + std::to_string(n) + " exceeds the file (" +
         std::to_string(bytes.size()) + " bytes)");
  const char *hp = reinterpret_cast<const char *>(bytes.data() + 8);
  json header;
  try {
    header = json::parse(hp, hp + n);
  } catch (const json::exception &e) {
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const std::byte *data = bytes.data() + 8 + n;
  const std::uint64_t data_size = bytes.size() - 8 - n;

  tensors_.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const std::string &why) { fail(name + ": " + why); };
    if (!v.is_object()) bad("entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) bad("missing dtype");
    if (sh == v.end() || !sh->is_array()) bad("missing shape");
    if (off == v.end() || !off->is_array() || off->size() != 2) bad("missing data_offsets");
    SafetensorsTensor t;
    t.name = name;
    t.dtype_name = dt->get<std::string>();
    const StDType *info = st_dtype(t.dtype_name);
    if (!info) bad("unknown dtype " + t.dtype_name);
    t.dtype = info->dtype;
    std::uint64_t numel = 1;
    for (const auto &d : *sh) {
      if (!d.is_number_unsigned()) bad("shape holds a non-integer or negative value");
      const std::uint64_t e = d.get<std::uint64_t>();
      if (e != 0 && numel > (std::uint64_t{1} << 62) / e) bad("element count overflows");
      numel *= e;
      t.shape.push_back(static_cast<std::int64_t>(e));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      bad("data_offsets are not non-negative integers");
    const auto begin = (*off)[0].get<std::uint64_t>();
    const auto end = (*off)[1].get<std::uint64_t>();
    if (begin > end) bad("data_offsets are reversed");
    if (end > data_size)
      bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
          ") overrun the data section (" + std::to_string(data_size) + " bytes)");
    if (numel > std::numeric_limits<std::uint64_t>::max() / info->size ||
        end - begin != numel * info->size)
      bad("byte size " + std::to_string(end - begin) + " != element count " +
          std::to_string(numel) + " x " + std::to_string(info->size));
    t.begin = begin;
    t.data = data + begin;
    t.nbytes = static_cast<std::size_t>(end - begin);
    tensors_.push_back(std::move(t));
  }
  // Overlapping tensors would alias each other's bytes: reject them.
  std::vector<const SafetensorsTensor *> order;
  order.reserve(tensors_.size());
  for (const auto &t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto *a, const auto *b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1]->nbytes == 0) continue;
    if (order[i]->begin < order[i - 1]->begin + order[i - 1]->nbytes)
      fail(order[i]->name + ": data overlaps " + order[i - 1]->name);
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensor *SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- model (one or several files) ----

namespace {

std::string read_text(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, p.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::unique_ptr<SafetensorsModel> SafetensorsModel::open(const std::filesystem::path &path) {
  namespace fs = std::filesystem;
  auto model = std::make_unique<SafetensorsModel>();
  fs::path index_path;
  fs::path single;
  if (fs::is_directory(path)) {
    if (fs::exists(path / "model.safetensors.index.json"))
      index_path = path / "model.safetensors.index.json";
    else if (fs::exists(path / "model.safetensors"))
      single = path / "model.safetensors";
    else
      throw Error(ErrorCode::kNotFound,
                  path.string() + ": no model.safetensors or model.safetensors.index.json");
  } else if (path.filename().string().ends_with(".index.json")) {
    index_path = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    model->origin_ = single.string();
    model->files_.push_back(SafetensorsFile::open(single));
    for (const auto &t : model->files_.back()->tensors())
      model->index_.emplace(t.name, std::make_pair(&t, model->files_.back().get()));
    return model;
  }

  model->origin_ = index_path.string();
  const std::string origin = index_path.string();
  json index;
  try {
    index = json::parse(read_text(index_path));
  } catch (const json::exception &e) {
    throw Error(ErrorCode::kFormat, origin + ": not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(ErrorCode::kFormat, origin + ": missing weight_map");
  std::map<std::string, const SafetensorsFile *> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw Error(ErrorCode::kFormat, origin + ": weight_map." + it.key() + " is not a string");
    const std::string shard = it.value().get<std::string>();
    // Shards live beside the index: a path that leaves the directory is a lying file.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      throw Error(ErrorCode::kFormat, origin + ": weight_map." + it.key() + ": bad shard name");
    auto s = shards.find(shard);
    if (s == shards.end()) {
      model->files_.push_back(SafetensorsFile::open(index_path.parent_path() / shard));
      s = shards.emplace(shard, model->files_.back().get()).first;
    }
    const SafetensorsTensor *t = s->second->find(it.key());
    if (!t)
      throw Error(ErrorCode::kFormat,
                  origin + ": " + it.key() + " is not in its shard " + s->second->path());
    model->index_.emplace(it.key(), std::make_pair(t, s->second));
  }
  return model;
}

const SafetensorsTensor *SafetensorsModel::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.first;
}

TensorView SafetensorsModel::view(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw Error(ErrorCode::kNotFound, origin_ + ": no tensor named " + std::string(name));
  return view(*it->second.first, it->second.second->path());
}

TensorView SafetensorsModel::view(const SafetensorsTensor &t, const std::string &origin) {
  if (!t.dtype)
    throw Error(ErrorCode::kUnsupported,
                origin + ": " + t.name + ": dtype " + t.dtype_name + " is not supported");
  TensorView v;
  v.name = t.name;
  v.dtype = *t.dtype;
  v.shape = t.shape;
  v.data = t.data;
  v.nbytes = t.nbytes;
  return v;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto &[k, v] : index_) out.push_back(k);
  return out;
}

}  // namespace keel
