// Running a Grammar as a pushdown automaton: a state is a set of stacks, each a chain
// of frames (a node in some rule, then the return positions of the rules that called
// it). Frames live in an append-only arena and share their tails, so a state costs a
// few indices and a rollback or a speculative walk is a truncation of the arena.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace keel::grammar {

inline constexpr std::int32_t kBottom = -1;  // the parent of a root-level frame

struct Frame {
  std::uint32_t node;
  std::int32_t parent;  // index in the arena, or kBottom
};

// A state: the frames that can consume a byte next, and whether the bottom rule (the
// document, or for precomputation the rule being looked at) may end here.
struct StateSet {
  std::vector<std::int32_t> tops;
  bool can_end = false;
  bool empty() const { return tops.empty() && !can_end; }
};

class FrameArena {
 public:
  std::int32_t push(std::uint32_t node, std::int32_t parent) {
    frames_.push_back({node, parent});
    return static_cast<std::int32_t>(frames_.size() - 1);
  }
  const Frame &operator[](std::int32_t i) const { return frames_[i]; }
  std::size_t size() const { return frames_.size(); }
  void truncate(std::size_t n) { frames_.resize(n); }

 private:
  friend class Pda;
  std::vector<Frame> frames_;
  // Scratch for closures, kept to avoid allocating per byte.
  std::vector<std::int32_t> work_;
  std::vector<std::uint64_t> seen_small_;
  std::unordered_set<std::uint64_t> seen_big_;
};

class Pda {
 public:
  explicit Pda(const Grammar &g) : g_(g) {}

  const Grammar &grammar() const { return g_; }
  // The state before any byte: the root rule's start, closed.
  StateSet start(FrameArena &arena) const;
  // The state at `node` with nothing below it (for per-node precomputation).
  StateSet at_node(FrameArena &arena, std::uint32_t node) const;
  // The state after `byte`; empty tops and !can_end when the byte is rejected.
  void advance(FrameArena &arena, const StateSet &in, std::uint8_t byte, StateSet &out) const;
  // True when some top can take `byte` (cheap test, no frames created).
  bool can_take(const FrameArena &arena, const StateSet &in, std::uint8_t byte) const;

  // Throws kResourceExhausted past this many frames in one state (ambiguous grammars).
  static constexpr std::size_t kMaxTops = 4096;

 private:
  void close(FrameArena &arena, StateSet &out) const;

  const Grammar &g_;
};

}  // namespace keel::grammar
