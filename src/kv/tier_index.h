// What the scheduler asks of the cache tiers below the device: is this block there?
// Kept apart from KvTiers so that the scheduler is tested with a fake.
#pragma once

#include "kv/block_hash.h"

namespace keel {

class TierIndex {
 public:
  virtual ~TierIndex() = default;
  // Whether a restore of `hash` can start now (host RAM or SSD).
  virtual bool contains(const BlockHash &hash) const = 0;
};

}  // namespace keel
