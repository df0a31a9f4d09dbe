#include "registry/model_path.h"

#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

namespace keel {

namespace fs = std::filesystem;

namespace {

bool has_gguf_magic(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

void check_model_path(const fs::path &path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(ErrorCode::kNotFound, path.string() + ": no such model file or directory");
  if (!fs::is_directory(path, ec)) {
    if (!has_gguf_magic(path))
      throw Error(ErrorCode::kInvalidArgument,
                  path.string() +
                      ": not a model (a model is a folder with config.json and "
                      "*.safetensors weights, or a .gguf file)");
    return;
  }
  bool weights = false;
  for (const auto &f : fs::directory_iterator(path, ec)) {
    const auto ext = f.path().extension();
    if (f.is_regular_file(ec) && (ext == ".safetensors" || ext == ".gguf")) {
      weights = true;
      break;
    }
  }
  const bool config = fs::is_regular_file(path / "config.json", ec);
  if (config && weights) return;
  if (!config && weights) {
    bool gguf_only = true;  // a folder holding a GGUF checkpoint needs no config.json
    for (const auto &f : fs::directory_iterator(path, ec))
      if (f.path().extension() == ".safetensors") gguf_only = false;
    if (gguf_only) return;
  }
  throw Error(ErrorCode::kInvalidArgument,
              path.string() + ": not a model folder (it has " +
                  (config    ? "config.json but no *.safetensors or .gguf weights"
                   : weights ? "weights but no config.json"
                             : "no config.json and no *.safetensors or .gguf weights") +
                  ")");
}

}  // namespace keel
