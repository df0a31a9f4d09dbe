#include "engine/eagle3_drafter.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "exec/cpu/cpu_model_runner.h"

namespace keel {

std::unique_ptr<Eagle3Drafter> Eagle3Drafter::open(const std::filesystem::path &path,
                                                   ModelRunner &target, ExecContext *ctx) {
  const std::string flag = "--speculative eagle3:" + path.string();
  auto *cpu_runner = dynamic_cast<cpu::CpuModelRunner *>(&target);
  if (ctx == nullptr || cpu_runner == nullptr)
    throw Error(ErrorCode::kUnsupported,
                flag + ": " + arch_name(target.config().arch) +
                    ": an EAGLE-3 head runs beside the CPU runner only (the CUDA and "
                    "tensor-parallel runners cannot hand it the target's hidden states yet)");
  if (target.config().kv_layout == KvLayout::kLatent)
    throw Error(ErrorCode::kUnsupported,
                flag + ": " + arch_name(target.config().arch) +
                    ": multi-head latent attention targets do not return their layers' hidden "
                    "states yet");
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec))
    throw Error(ErrorCode::kNotFound, flag + ": not a directory (config.json and safetensors)");
  std::unique_ptr<arch::Eagle3Head> head;
  try {
    head = std::make_unique<arch::Eagle3Head>(path, target.config(), cpu_runner->model().embed());
  } catch (const Error &e) {
    throw Error(e.code(), flag + ": " + e.what());
  }
  auto d = std::make_unique<Eagle3Drafter>(std::move(head), *ctx);
  std::string layers;
  for (const std::int32_t l : d->head_->aux_layers())
    layers += (layers.empty() ? "" : ",") + std::to_string(l);
  std::fprintf(stderr,
               "keel engine: EAGLE-3 head %s: %.1f MiB of weights, draft vocabulary %lld, "
               "target layers %s\n",
               path.string().c_str(), static_cast<double>(d->weights_bytes()) / (1 << 20),
               static_cast<long long>(d->head_->config().draft_vocab_size), layers.c_str());
  return d;
}

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<arch::Eagle3Head> head, ExecContext &ctx)
    : HiddenStateDrafter(head->aux_width(), head->hidden_size()),
      head_(std::move(head)),
      ctx_(ctx) {}

}  // namespace keel
