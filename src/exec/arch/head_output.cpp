#include "exec/arch/head_output.h"

#include <string>

#include "core/error.h"
#include "exec/cpu/norm.h"

namespace keel::arch {

void check_head_input(const MtpCache &cache, const MtpInput &in, std::int64_t width,
                      std::int64_t vocab, const char *head) {
  const auto fail = [&](const char *why) {
    throw Error(ErrorCode::kInvalidArgument, std::string(head) + ": " + why);
  };
  if (static_cast<std::int64_t>(in.hidden.size()) !=
      static_cast<std::int64_t>(in.tokens.size()) * width)
    fail("hidden rows do not match the tokens");
  if (in.start_pos < 0 || in.start_pos > cache.length) fail("start_pos past the cached positions");
  for (const TokenId t : in.tokens)
    if (t < 0 || t >= vocab) fail("token id out of range");
}

void require_mtp_layer(const ModelConfig &cfg) {
  if (!cfg.moe || cfg.moe->nextn_predict_layers <= 0)
    throw Error(ErrorCode::kUnsupported,
                std::string(arch_name(cfg.arch)) +
                    ": the model has no MTP layer (num_nextn_predict_layers is 0)");
}

void head_output(const float *x, std::int64_t n, std::int64_t hidden, const MtpInput &in,
                 const std::vector<float> &norm, float eps, const TensorView &head,
                 std::int64_t vocab, ExecContext &ctx, cpu::LinearScratch &scratch,
                 MtpOutput &out) {
  out.hidden.assign(x, x + n * hidden);
  const std::int64_t first = in.first_head_row();
  const std::int64_t R = n - first;
  out.argmax.assign(static_cast<std::size_t>(R), 0);
  out.logits.clear();
  if (R == 0) return;
  float *h = ctx.workspace().floats(R * hidden);
  cpu::rmsnorm(x + first * hidden, norm.data(), h, R, hidden, eps);
  cpu::linear_argmax(head, h, R, out.argmax.data(), ctx.pool(), scratch);
  if (in.want_logits) {
    out.logits.resize(static_cast<std::size_t>(R * vocab));
    cpu::linear(head, h, R, out.logits.data(), ctx.pool(), scratch);
  }
}

}  // namespace keel::arch
