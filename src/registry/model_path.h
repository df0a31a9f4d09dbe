// What `keel serve PATH` accepts as a model, checked when the server starts (issue 31,
// item 9): a folder that is not a model would otherwise be listed in /v1/models and fail
// only on its first request. A model is a folder with config.json and its weights
// (*.safetensors, or a .gguf file), or a .gguf file.
#pragma once

#include <filesystem>

namespace keel {

// Throws Error(kNotFound) for a missing path, Error(kInvalidArgument) naming what is
// missing for one that is not a model.
void check_model_path(const std::filesystem::path &path);

}  // namespace keel
