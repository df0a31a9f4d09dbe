// Where the built-in default model lives: $KEEL_DEFAULT_MODEL, else models/default
// beside the binary's tree (build/keel -> ../models/default), else the source tree.
#pragma once

#include <filesystem>
#include <optional>

namespace keel {

std::optional<std::filesystem::path> default_model_dir();

}  // namespace keel
