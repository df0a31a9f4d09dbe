// One step of a checkpoint's multi-token-prediction (MTP) layer over consecutive
// positions of one sequence (docs/ARCHITECTURE.md, "The verify shape"): the drafter
// hands the runner the target's hidden state h_t as the runner returns it
// (ForwardOutput::hidden, before the target's final norm, which the layer applies: it
// reads the vector the target's LM head reads) and the token x_{t+1} of each position t,
// and gets back the layer's output h'_t (before the head's own norm) and its head's argmax
// (the guess for x_{t+2}). A chained draft feeds h'_t back as the next position's h
// (`chained`: no target norm on it, as vLLM chains its MTP layer). The layer attends over
// its own earlier positions, whose keys and values the caller keeps in an MtpCache per
// sequence (opaque to it: the runner's layout) and rolls back by lowering `length`.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/ids.h"

namespace keel {

// A head's per-sequence cache where it lives on a device (a CUDA head's keys and values:
// exec/cuda/cuda_eagle3_head.h), owned by the MtpCache and freed with it; what it is, only
// the head that made it knows.
class MtpDeviceCache {
 public:
  virtual ~MtpDeviceCache() = default;
  virtual std::int64_t bytes() const = 0;  // device memory it holds
};

struct MtpCache {
  std::vector<float> rows;  // the runner's per-position entries, positions [0, length)
  std::int32_t length = 0;  // positions held; a step at start_pos <= length drops the rest
  std::unique_ptr<MtpDeviceCache> device;  // a device head's entries instead of `rows`
};

struct MtpInput {
  std::int32_t start_pos = 0;     // position of the first row
  std::span<const float> hidden;  // [n, hidden_size]: h_t, before the final norm
  // `hidden` holds the layer's own h' (a chained draft), not the target's rows: the
  // target's final norm is not applied to it.
  bool chained = false;
  std::span<const TokenId> tokens;  // [n]: x_{t+1}
  // Which rows go through the head: none (catching up over confirmed positions), the
  // last (a draft), or all (tests).
  enum class Head : std::uint8_t { kNone, kLast, kAll } head = Head::kLast;
  bool want_logits = false;  // also return the head's logits of those rows (tests)
  // The first row through the head: rows [first_head_row(), tokens.size()) are.
  std::int64_t first_head_row() const {
    const auto n = static_cast<std::int64_t>(tokens.size());
    return head == Head::kAll ? 0 : head == Head::kLast ? n - 1 : n;
  }
};

struct MtpOutput {
  std::vector<float> hidden;    // [n, hidden_size]: h'_t, before the head's norm
  std::vector<TokenId> argmax;  // [head rows]
  std::vector<float> logits;    // [head rows, vocab] when asked
};

}  // namespace keel
