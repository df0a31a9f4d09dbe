#include "grammar/pda.h"

#include <algorithm>

#include "core/error.h"

namespace keel::grammar {

namespace {

std::uint64_t key(std::uint32_t node, std::int32_t parent) {
  return (std::uint64_t(node) << 32) | std::uint32_t(parent);
}

}  // namespace

StateSet Pda::start(FrameArena &arena) const { return at_node(arena, g_.rules[g_.root].start); }

StateSet Pda::at_node(FrameArena &arena, std::uint32_t node) const {
  StateSet s;
  arena.work_.assign(1, arena.push(node, kBottom));
  close(arena, s);
  return s;
}

bool Pda::can_take(const FrameArena &arena, const StateSet &in, std::uint8_t byte) const {
  for (std::int32_t t : in.tops) {
    const auto &n = g_.nodes[arena[t].node];
    for (auto i = n.bytes_begin; i < n.bytes_end; ++i) {
      const auto &e = g_.byte_edges[i];
      if (byte >= e.lo && byte <= e.hi) return true;
    }
  }
  return false;
}

void Pda::advance(FrameArena &arena, const StateSet &in, std::uint8_t byte, StateSet &out) const {
  arena.work_.clear();
  for (std::int32_t t : in.tops) {
    const Frame f = arena[t];
    const auto &n = g_.nodes[f.node];
    for (auto i = n.bytes_begin; i < n.bytes_end; ++i) {
      const auto &e = g_.byte_edges[i];
      if (byte < e.lo) break;  // edges are sorted by lo
      if (byte <= e.hi) arena.work_.push_back(arena.push(e.target, f.parent));
    }
  }
  close(arena, out);
}

// Expands the frames in arena.work_: calls push the callee's start over the return
// position, finished rules pop to their caller. Frames equal in (node, parent) are
// merged; left recursion was refused at build time, so this terminates.
void Pda::close(FrameArena &arena, StateSet &out) const {
  out.tops.clear();
  out.can_end = false;
  auto &work = arena.work_;
  auto &small = arena.seen_small_;
  auto &big = arena.seen_big_;
  small.clear();
  bool use_big = false;
  auto first_visit = [&](std::uint64_t k) {
    if (!use_big) {
      if (std::find(small.begin(), small.end(), k) != small.end()) return false;
      small.push_back(k);
      if (small.size() > 32) {
        big.clear();
        big.insert(small.begin(), small.end());
        use_big = true;
      }
      return true;
    }
    return big.insert(k).second;
  };
  std::size_t steps = 0;
  while (!work.empty()) {
    const std::int32_t fi = work.back();
    work.pop_back();
    const Frame f = arena[fi];
    if (!first_visit(key(f.node, f.parent))) continue;
    if (++steps > 8 * kMaxTops)
      throw Error(ErrorCode::kResourceExhausted, "grammar: too ambiguous (too many parse stacks)");
    const auto &n = g_.nodes[f.node];
    if (n.bytes_end > n.bytes_begin) out.tops.push_back(fi);
    for (auto i = n.calls_begin; i < n.calls_end; ++i) {
      const auto &c = g_.call_edges[i];
      const std::int32_t ret = arena.push(c.target, f.parent);
      work.push_back(arena.push(g_.rules[c.rule].start, ret));
    }
    if (n.final) {
      if (f.parent == kBottom)
        out.can_end = true;
      else
        work.push_back(f.parent);
    }
  }
  if (out.tops.size() > kMaxTops)
    throw Error(ErrorCode::kResourceExhausted, "grammar: too ambiguous (too many parse stacks)");
}

}  // namespace keel::grammar
