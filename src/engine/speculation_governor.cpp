#include "engine/speculation_governor.h"

#include <algorithm>
#include <bit>

namespace keel {
namespace {
// Each step's weight decays by this much a later step of its mode: the sums describe
// about the last 64 steps.
constexpr double kDecay = 1.0 - 1.0 / 64.0;
}  // namespace

int SpeculationGovernor::bucket_of(std::int32_t running) {
  const auto n = static_cast<std::uint32_t>(std::max(running, 1));
  return std::min(static_cast<int>(std::bit_width(n - 1)), kBuckets - 1);
}

void SpeculationGovernor::enter(Bucket &b, Phase phase, bool drafting) {
  b.phase = phase;
  b.drafting = drafting;
  b.phase_steps = b.phase_verified = 0;
}

void SpeculationGovernor::choose(Bucket &b) const {
  const bool probed = b.phase == Phase::kProbe, before = b.chosen_drafting;
  if (b.on.tokens <= 0.0 || b.off.tokens <= 0.0) {  // a probe that measured nothing
    enter(b, Phase::kChosen, b.chosen_drafting);
    return;
  }
  b.speedup = b.off.seconds_per_token() / b.on.seconds_per_token();
  b.chosen_drafting = *b.speedup >= 1.0 / (1.0 + o_.margin);
  enter(b, Phase::kChosen, b.chosen_drafting);
  b.probe_every = probed && b.chosen_drafting == before
                      ? std::min(2 * b.probe_every, std::max(o_.max_probe_every, o_.probe_every))
                      : o_.probe_every;
}

void SpeculationGovernor::record_step(std::int32_t running, bool drafting, bool verified,
                                      double seconds, std::int32_t tokens) {
  if (tokens <= 0 || seconds < 0.0) return;
  Bucket &b = bucket(running);
  Mode &m = verified ? b.on : b.off;
  m.seconds = m.seconds * kDecay + seconds;
  m.tokens = m.tokens * kDecay + tokens;
  if (drafting != b.drafting) return;  // a step decided before the bucket changed its mode
  // With drafting on, a phase counts the steps that verified drafts, but ends after 4x
  // its length whatever the drafter guessed (a probe must end).
  ++b.phase_steps;
  if (verified) ++b.phase_verified;
  const auto done = [&](std::int32_t n) {
    return b.drafting ? b.phase_verified >= n || b.phase_steps >= 4 * n : b.phase_steps >= n;
  };
  switch (b.phase) {
    case Phase::kWarmOn:
      // Until the drafter has guessed warmup_steps times there is nothing to weigh.
      if (b.phase_verified >= o_.warmup_steps) enter(b, Phase::kWarmOff, false);
      break;
    case Phase::kWarmOff:
      if (done(o_.warmup_steps)) choose(b);
      break;
    case Phase::kChosen:
      if (b.phase_steps >= b.probe_every) {
        // The mode left is measured afresh: its old figures may describe another workload.
        enter(b, Phase::kProbe, !b.drafting);
        (b.drafting ? b.on : b.off) = Mode{};
      }
      break;
    case Phase::kProbe:
      if (done(o_.probe_steps)) choose(b);
      break;
  }
}

void SpeculationGovernor::record_proposal(std::int32_t running, double seconds) {
  if (seconds > 0.0) bucket(running).on.seconds += seconds;
}

}  // namespace keel
