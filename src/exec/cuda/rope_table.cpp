#include "exec/cuda/rope_table.h"

#include <utility>

#include "exec/cpu/rope.h"

namespace keel::cuda {

// One computation for both backends (the CPU's, HF's float32 arithmetic), so a model's
// rotations agree bit for bit in their frequencies wherever it runs.
RopeTable make_rope_table(const ModelConfig &c) {
  cpu::RopeTable t = cpu::make_rope_table(c);
  return RopeTable{std::move(t.inv_freq), t.attention_scaling};
}

}  // namespace keel::cuda
