// A random EAGLE-3 head (formats/make_eagle3_head.h) wired so that its guess is the target's
// own prediction at the position before: fc passes the last aux row (the target's last
// layer's output, i.e. its final hidden state) through, the block adds nothing (o_proj and
// down_proj zero), norm is ones (make_model's model.norm.weight is ones) and lm_head is the
// target's over the whole vocabulary (d2t zero). Its first draft is the target's argmax at
// the position before; a chain repeats it (h' == g).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/make_eagle3_head.h"

namespace keel::test {

// Sets o.draft_vocab and o.edit for o.target, whose lm_head is `lm_head` ([vocab, hidden]
// f32); with `bf16`, every other weight is rounded to a bf16 value too (a device head then
// computes with the very numbers the CPU head does).
inline void make_copying(MakeEagle3Options &o, std::vector<float> lm_head, bool bf16 = false) {
  const std::int64_t H = o.target.hidden_size;
  const std::int64_t A = o.aux_layers.empty() ? 3 : static_cast<std::int64_t>(o.aux_layers.size());
  o.draft_vocab = o.target.vocab_size;
  o.edit = [lm_head = std::move(lm_head), H, A, bf16](const std::string &name,
                                                      std::vector<float> &v) {
    if (name == "fc.weight") {
      std::fill(v.begin(), v.end(), 0.0f);
      for (std::int64_t i = 0; i < H; ++i)
        v[static_cast<std::size_t>(i * A * H + (A - 1) * H + i)] = 1;
    } else if (name == "midlayer.self_attn.o_proj.weight" ||
               name == "midlayer.mlp.down_proj.weight") {
      std::fill(v.begin(), v.end(), 0.0f);
    } else if (name == "norm.weight") {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (name == "lm_head.weight") {
      v = lm_head;
    } else if (bf16) {
      for (float &x : v) x = bf16_to_f32(f32_to_bf16(x));
    }
  };
}

}  // namespace keel::test
