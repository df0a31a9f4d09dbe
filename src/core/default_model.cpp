#include "core/default_model.h"

#include <cstdlib>
#include <system_error>

namespace keel {

namespace {
bool is_model_dir(const std::filesystem::path &p) {
  std::error_code ec;
  return std::filesystem::exists(p / "config.json", ec) ||
         std::filesystem::is_regular_file(p, ec);  // a .gguf file
}
}  // namespace

std::optional<std::filesystem::path> default_model_dir() {
  if (const char *env = std::getenv("KEEL_DEFAULT_MODEL"); env && *env) return std::filesystem::path(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      for (const auto &rel : {"models/default", "share/keel/models/default"}) {
        if (is_model_dir(dir / rel)) return dir / rel;
      }
    }
  }
#ifdef KEEL_SOURCE_DIR_FOR_DEFAULT_MODEL
  if (is_model_dir(std::filesystem::path(KEEL_SOURCE_DIR_FOR_DEFAULT_MODEL) / "models/default"))
    return std::filesystem::path(KEEL_SOURCE_DIR_FOR_DEFAULT_MODEL) / "models/default";
#endif
  return std::nullopt;
}

}  // namespace keel
