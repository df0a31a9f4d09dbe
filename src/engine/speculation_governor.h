// Whether drafting pays, measured (issue 30's adaptive policy). Speculative decoding trades
// draft and verify work for tokens: where the drafter costs much next to the target (a
// draft model half the target's time a token on a CPU) or few drafts are accepted, it makes
// decoding slower. Per batch-size bucket the governor times the engine's decode steps as
// seconds per emitted token, those that verified drafts (their proposal's time charged to
// them) apart from those that did not, and lets sequences draft only where the first are
// not worse than the second by more than a margin. Each bucket first measures verify steps
// (drafting on until it has warmup_steps of them: a drafter that never guesses costs
// nothing and measures nothing), then plain steps (drafting off), then keeps the better
// mode and now and then measures the other again for a few steps (less often while probes
// confirm it), so a change in the workload (copy-heavy edits after prose) brings drafting
// back. Steps with prefill rows are not measured. Engine thread only.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace keel {

class SpeculationGovernor {
 public:
  struct Options {
    std::int32_t warmup_steps = 16;  // steps measured in each mode before the first choice
    std::int32_t probe_every = 256;  // steps in the chosen mode before the first probe
    // A probe that confirms the choice doubles the steps to the next, up to this many (a
    // losing mode probed costs its loss for probe_steps); one that changes it resets them.
    std::int32_t max_probe_every = 4096;
    std::int32_t probe_steps = 16;  // steps of a probe
    double margin = 0.03;           // drafting stays unless it costs this much more a token
  };

  SpeculationGovernor() : SpeculationGovernor(Options{}) {}
  explicit SpeculationGovernor(Options options) : o_(options) {}

  // Whether sequences may draft at the next step, with `running` sequences in the batch.
  bool should_draft(std::int32_t running) const { return bucket(running).drafting; }
  // A decode step (no prefill rows) ran in the mode should_draft gave for `running`
  // (`drafting`), and `verified` drafts or not: `seconds` from its start to its outputs,
  // `tokens` emitted by it.
  void record_step(std::int32_t running, bool drafting, bool verified, double seconds,
                   std::int32_t tokens);
  // Seconds spent proposing the drafts the next step verifies (charged to verify steps).
  void record_proposal(std::int32_t running, double seconds);

  // Whether the last choice at `running` sequences was not to draft (a probe with drafts
  // may be running).
  bool paused(std::int32_t running) const { return !bucket(running).chosen_drafting; }
  // Drafting's speed-up that choice was made on: seconds a token without drafts over
  // seconds a token with them (none before the first choice).
  std::optional<double> speedup(std::int32_t running) const { return bucket(running).speedup; }

 private:
  struct Mode {  // decaying sums over verify steps (on) or plain steps (off)
    double seconds = 0.0, tokens = 0.0;
    double seconds_per_token() const { return seconds / tokens; }
  };
  enum class Phase { kWarmOn, kWarmOff, kChosen, kProbe };
  struct Bucket {
    Mode on, off;
    Phase phase = Phase::kWarmOn;
    bool drafting = true;             // the mode of the next step
    std::int32_t phase_steps = 0;     // steps measured in the current phase
    std::int32_t phase_verified = 0;  // of them, steps that verified drafts
    bool chosen_drafting = true;      // the last choice (drafting until there is one)
    std::int32_t probe_every = 0;     // steps from this choice to the next probe
    std::optional<double> speedup;    // what it was made on
  };
  static constexpr int kBuckets = 8;  // 1, 2, 3-4, 5-8, ..., 65+ sequences
  static int bucket_of(std::int32_t running);
  Bucket &bucket(std::int32_t running) { return buckets_[bucket_of(running)]; }
  const Bucket &bucket(std::int32_t running) const { return buckets_[bucket_of(running)]; }
  // Starts `phase` with drafting on or off, its step counts at zero.
  static void enter(Bucket &b, Phase phase, bool drafting);
  void choose(Bucket &b) const;

  Options o_;
  std::array<Bucket, kBuckets> buckets_{};
};

}  // namespace keel
