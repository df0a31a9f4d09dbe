// An EAGLE-3 draft head bound to a target runner's device (ModelRunner::open_eagle3_head):
// on the CPU runner the head of exec/arch/eagle3_head.h on the runner's ExecContext, on
// the CUDA runner exec/cuda/cuda_eagle3_head.h on its CudaContext and stream. Both load
// and check the files the same way (arch::Eagle3Weights) and compute the same step
// (exec/mtp_step.h; the math is in eagle3_head.h). The drafter (engine/eagle3_drafter.h)
// sees only this, so the engine layer names no backend.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/mtp_step.h"
#include "formats/eagle3_config.h"

namespace keel {

class Eagle3Runner {
 public:
  virtual ~Eagle3Runner() = default;
  virtual const Eagle3Config &config() const = 0;
  // The target layers whose outputs feed fc, in order (ForwardBatch::hidden_layers).
  virtual const std::vector<std::int32_t> &aux_layers() const = 0;
  std::int64_t hidden_size() const { return config().layer.hidden_size; }
  // Floats of one position's aux rows: aux layers x the target's hidden size.
  std::int64_t aux_width() const {
    return static_cast<std::int64_t>(aux_layers().size()) * config().target_hidden_size;
  }
  // Bytes of the head's own tensors where they are held (the target's embedding, when
  // borrowed, not counted).
  virtual std::int64_t weights_bytes() const = 0;
  // Memory it set aside beside them at open (a device head's cache pool and scratch, and
  // the target's hidden-rows buffer), for the log.
  virtual std::int64_t reserved_bytes() const { return 0; }
  // One step of the head over `in` (MtpInput::hidden: [n, aux_width()], or [n, hidden_size()]
  // when chained), its keys and values into `cache`; MtpOutput::argmax holds target ids.
  virtual void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) = 0;
  // Forgets the positions from `kept` on (chained drafts): lowers cache.length.
  virtual void truncate(MtpCache &cache, std::int32_t kept) = 0;
};

}  // namespace keel
