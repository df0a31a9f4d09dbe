// The output of a drafting head's step (an MTP layer, an EAGLE-3 head), both heads the same
// way: h' of every row before the norm (what a chained draft is fed), and over norm(h') of
// the rows MtpInput::head asks for (none, the last, all), the argmax of `head` (and its
// logits when MtpInput::want_logits).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor_view.h"
#include "exec/cpu/linear.h"
#include "exec/exec_context.h"
#include "exec/mtp_step.h"
#include "formats/model_config.h"

namespace keel::arch {

// Throws Error(kInvalidArgument), the message led by `head` ("mtp", "eagle3"), when `in`
// does not fit: hidden rows other than tokens x `width` floats, a start past the cached
// positions, a token outside [0, vocab). Every head (CPU or device) checks its input so.
void check_head_input(const MtpCache &cache, const MtpInput &in, std::int64_t width,
                      std::int64_t vocab, const char *head);

// Throws Error(kUnsupported) naming the architecture when `cfg` has no MTP layer
// (num_nextn_predict_layers 0): every MTP layer (CPU or device) refuses so.
void require_mtp_layer(const ModelConfig &cfg);

// x: [n, hidden] h'; norm: [hidden]; head: [vocab, hidden].
void head_output(const float *x, std::int64_t n, std::int64_t hidden, const MtpInput &in,
                 const std::vector<float> &norm, float eps, const TensorView &head,
                 std::int64_t vocab, ExecContext &ctx, cpu::LinearScratch &scratch, MtpOutput &out);

}  // namespace keel::arch
