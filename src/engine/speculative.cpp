#include "engine/speculative.h"

#include <algorithm>

#include "core/error.h"
#include "engine/draft_model_drafter.h"
#include "engine/eagle3_drafter.h"
#include "engine/mtp_drafter.h"
#include "engine/ngram_drafter.h"
#include "exec/model_runner.h"

namespace keel {

namespace {
constexpr std::string_view kDraftPrefix = "draft:";
constexpr std::string_view kEagle3Prefix = "eagle3:";

// "PREFIX:PATH" with PATH made absolute; throws naming the method when PATH is empty or
// missing.
std::string canonical_path_method(const std::string &method, std::string_view prefix,
                                  const char *what) {
  const std::filesystem::path path(method.substr(prefix.size()));
  if (path.empty())
    throw Error(ErrorCode::kInvalidArgument, "--speculative " + std::string(prefix) +
                                                 " needs the " + what + "'s path (" +
                                                 std::string(prefix) + "PATH)");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(ErrorCode::kNotFound, "--speculative " + method + ": no such file or directory");
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return std::string(prefix) + (ec ? path : abs).lexically_normal().string();
}
}  // namespace

std::optional<std::filesystem::path> draft_model_path(const std::string &method) {
  if (!method.starts_with(kDraftPrefix)) return std::nullopt;
  return std::filesystem::path(method.substr(kDraftPrefix.size()));
}

std::optional<std::filesystem::path> eagle3_head_path(const std::string &method) {
  if (!method.starts_with(kEagle3Prefix)) return std::nullopt;
  return std::filesystem::path(method.substr(kEagle3Prefix.size()));
}

std::string parse_speculative_method(const std::string &method) {
  if (method.empty() || method == "off") return "";
  if (method == "ngram" || method == "mtp") return method;
  if (draft_model_path(method)) return canonical_path_method(method, kDraftPrefix, "draft model");
  if (eagle3_head_path(method)) return canonical_path_method(method, kEagle3Prefix, "EAGLE-3 head");
  throw Error(ErrorCode::kInvalidArgument, "speculative: unknown method '" + method +
                                               "' (off, ngram, mtp, draft:PATH or eagle3:PATH)");
}

std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig &config, ModelRunner *runner) {
  const std::string method = parse_speculative_method(config.method);
  if (config.num_speculative_tokens > 16)
    throw Error(ErrorCode::kInvalidArgument, "speculative: num_speculative_tokens above 16");
  if (!config.enabled()) return nullptr;
  if (config.make_drafter) return config.make_drafter();
  if (auto path = draft_model_path(method)) {
    if (runner == nullptr || !runner->verifies_drafts())
      throw Error(ErrorCode::kUnsupported,
                  "--speculative " + method +
                      ": this runner does not verify drafts (the tensor-parallel runner cannot "
                      "verify drafts yet)");
    return DraftModelDrafter::open(*path, *runner, config.draft_kv_blocks);
  }
  if (auto path = eagle3_head_path(method)) {
    if (runner == nullptr || !runner->verifies_drafts())
      throw Error(ErrorCode::kUnsupported,
                  "--speculative " + method +
                      ": this runner does not verify drafts (the tensor-parallel runner cannot "
                      "verify drafts yet)");
    return Eagle3Drafter::open(*path, *runner);
  }
  if (method == "mtp") {
    if (runner == nullptr || !runner->verifies_drafts())
      throw Error(
          ErrorCode::kUnsupported,
          "--speculative mtp: " +
              (runner ? std::string(arch_name(runner->config().arch)) : std::string("no model")) +
              ": this runner does not verify drafts (the tensor-parallel runner cannot "
              "run MTP heads yet)");
    return MtpDrafter::open(*runner);
  }
  return std::make_unique<NgramDrafter>(config.ngram_max, config.ngram_min);
}

bool AcceptanceTracker::should_draft() {
  if (pause_ > 0) {
    --pause_;
    return false;
  }
  return true;
}

void AcceptanceTracker::record(std::int32_t drafted, std::int32_t accepted) {
  if (drafted <= 0) return;
  ema_ = 0.7 * ema_ + 0.3 * static_cast<double>(accepted) / drafted;
  if (ema_ < 0.25) {
    backoff_ = std::min(std::max(2 * backoff_, 4), 64);
    pause_ = backoff_;
    ema_ = 0.5;  // a fresh chance after the pause
  } else if (accepted > 0) {
    backoff_ /= 2;
  }
}

}  // namespace keel
