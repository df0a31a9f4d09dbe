#include "engine/eagle3_drafter.h"

#include <cstdio>

#include "core/error.h"

namespace keel {

std::unique_ptr<Eagle3Drafter> Eagle3Drafter::open(const std::filesystem::path &path,
                                                   ModelRunner &target) {
  const std::string flag = "--speculative eagle3:" + path.string();
  if (target.config().kv_layout == KvLayout::kLatent)
    throw Error(ErrorCode::kUnsupported,
                flag + ": " + arch_name(target.config().arch) +
                    ": multi-head latent attention targets do not return their layers' hidden "
                    "states yet");
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec))
    throw Error(ErrorCode::kNotFound, flag + ": not a directory (config.json and safetensors)");
  std::unique_ptr<Eagle3Runner> head;
  try {
    head = target.open_eagle3_head(path);
  } catch (const Error &e) {
    throw Error(e.code(), flag + ": " + e.what());
  }
  auto d = std::make_unique<Eagle3Drafter>(std::move(head));
  std::string layers;
  for (const std::int32_t l : d->head_->aux_layers()) {
    if (!layers.empty()) layers += ',';
    layers += std::to_string(l);
  }
  std::fprintf(stderr,
               "keel engine: EAGLE-3 head %s: %.1f MiB of weights (%.1f MiB more set aside), "
               "draft vocabulary %lld, target layers %s\n",
               path.string().c_str(), static_cast<double>(d->weights_bytes()) / (1 << 20),
               static_cast<double>(d->head_->reserved_bytes()) / (1 << 20),
               static_cast<long long>(d->head_->config().draft_vocab_size), layers.c_str());
  return d;
}

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<Eagle3Runner> head)
    : HiddenStateDrafter(head->aux_width(), head->hidden_size()), head_(std::move(head)) {}

}  // namespace keel
