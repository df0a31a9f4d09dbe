#include "kv/kv_sizing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace keel {

namespace {

constexpr std::int64_t kMaxBlocks = std::numeric_limits<std::int32_t>::max();

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

void check_shape(std::int64_t block_size, std::int64_t block_bytes) {
  if (block_size <= 0 || block_bytes <= 0)
    throw Error(ErrorCode::kInvalidArgument, "kv sizing: block size and bytes must be positive");
}

// An explicit size, or nullopt when the plan should choose.
std::optional<KvPlan> explicit_plan(const KvOverride &o, std::int64_t block_size,
                                    std::int64_t block_bytes) {
  if (o.blocks < 0)
    throw Error(ErrorCode::kInvalidArgument, "--kv-blocks: must be 0 (automatic) or more");
  if (o.tokens < 0)
    throw Error(ErrorCode::kInvalidArgument, "--max-kv-tokens: must be 0 (automatic) or more");
  KvPlan p;
  p.block_size = block_size;
  p.block_bytes = block_bytes;
  if (o.blocks > 0) {
    p.blocks = o.blocks;
    p.rule = "--kv-blocks";
  } else if (o.tokens > 0) {
    p.blocks = ceil_div(o.tokens, block_size);
    p.rule = "--max-kv-tokens";
  } else {
    return std::nullopt;
  }
  if (p.blocks > kMaxBlocks)
    throw Error(ErrorCode::kInvalidArgument,
                p.rule + ": " + std::to_string(p.blocks) + " blocks is more than a pool holds");
  return p;
}

}  // namespace

std::string describe_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const bool gib = std::abs(b) >= 1024.0 * 1024 * 1024;
  const bool mib = !gib && std::abs(b) >= 1024.0 * 1024;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f %s (%lld bytes)",
                gib   ? b / (1024.0 * 1024 * 1024)
                : mib ? b / (1024.0 * 1024)
                      : b / 1024.0,
                gib   ? "GiB"
                : mib ? "MiB"
                      : "KiB",
                static_cast<long long>(bytes));
  return buf;
}

KvPlan plan_host_kv(const HostKvInputs &in) {
  check_shape(in.block_size, in.block_bytes);
  if (auto p = explicit_plan(in.override_, in.block_size, in.block_bytes)) {
    // Pages commit as blocks are written: a pool larger than the memory there is would
    // end in the OOM killer under load, so it is refused now.
    if (in.mem_available > 0 && p->bytes() > in.mem_available)
      p->refusal = "needs a KV pool of " + std::to_string(p->blocks) + " blocks (" + p->rule +
                   "), " + describe_bytes(p->bytes()) + ", but the host has only " +
                   describe_bytes(in.mem_available) + " available";
    return *p;
  }
  KvPlan p;
  p.block_size = in.block_size;
  p.block_bytes = in.block_bytes;
  const std::int64_t context = std::max<std::int64_t>(in.context_tokens, in.block_size);
  // Blocks, not tokens, from here on: each cap rounds down to whole blocks.
  std::int64_t blocks = ceil_div(context, in.block_size) * kHostDefaultSequences;
  p.rule = std::to_string(kHostDefaultSequences) + " x context";
  if (blocks * in.block_size < kHostMinDefaultTokens) {
    blocks = ceil_div(kHostMinDefaultTokens, in.block_size);
    p.rule = "default minimum";
  }
  if (in.mem_available > 0) {
    const auto cap = static_cast<std::int64_t>(static_cast<double>(in.mem_available) *
                                               kHostRamFraction * in.ram_share) /
                     in.block_bytes;
    if (cap < blocks) {
      blocks = cap;
      p.rule = "MemAvailable";
    }
  }
  if (in.budget_share > 0) {
    const std::int64_t left = in.budget_share - in.weights_bytes - in.other_bytes;
    const std::int64_t cap = std::max<std::int64_t>(left, 0) / in.block_bytes;
    if (cap < blocks) {
      blocks = cap;
      p.rule = "budget";
    }
  }
  p.blocks = std::min(blocks, kMaxBlocks);
  const std::int64_t floor_blocks = ceil_div(std::min(context, kMinPoolTokens), in.block_size);
  if (p.blocks < floor_blocks) {
    const std::int64_t need = in.weights_bytes + in.other_bytes + floor_blocks * in.block_bytes;
    std::ostringstream s;
    s << "needs " << describe_bytes(need) << " (weights " << describe_bytes(in.weights_bytes)
      << ", workspace and host tier " << describe_bytes(in.other_bytes)
      << ", a KV pool of at least " << floor_blocks * in.block_size << " tokens "
      << describe_bytes(floor_blocks * in.block_bytes) << ")";
    if (p.rule == "budget")
      s << " but its share of the memory budget is " << describe_bytes(in.budget_share);
    else
      s << " but its share of half the host's available memory is "
        << describe_bytes(
               static_cast<std::int64_t>(in.mem_available * kHostRamFraction * in.ram_share));
    p.refusal = s.str();
  }
  return p;
}

KvPlan plan_device_kv(const DeviceKvInputs &in) {
  check_shape(in.block_size, in.block_bytes);
  if (!(in.fraction > 0 && in.fraction <= 1))
    throw Error(ErrorCode::kInvalidArgument, "--gpu-memory-fraction: must be in (0, 1]");
  if (auto p = explicit_plan(in.override_, in.block_size, in.block_bytes)) {
    if (p->bytes() > in.free_now)
      p->refusal = "the KV pool of " + std::to_string(p->blocks) + " blocks needs " +
                   describe_bytes(p->bytes()) + " but only " + describe_bytes(in.free_now) +
                   " of device memory is free after the weights and buffers";
    return *p;
  }
  KvPlan p;
  p.block_size = in.block_size;
  p.block_bytes = in.block_bytes;
  p.rule = "device share";
  const auto share = static_cast<std::int64_t>(static_cast<double>(in.total_bytes) * in.fraction);
  const std::int64_t own = std::max<std::int64_t>(in.free_at_open - in.free_now, 0);
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.3g", in.fraction);
  p.refusal = device_share_refusal(in.total_bytes, in.free_at_open, in.fraction);
  if (!p.refusal.empty()) return p;
  // The share minus what this engine holds already; never more than is free now.
  const std::int64_t left = std::min(share - own, in.free_now) - in.reserve_bytes;
  p.blocks = std::min(std::max<std::int64_t>(left, 0) / in.block_bytes, kMaxBlocks);
  if (p.blocks < 1)
    p.refusal = "its share of the device, " + std::string(frac) + " x " +
                describe_bytes(in.total_bytes) + " = " + describe_bytes(share) +
                ", is used up by its weights and buffers (" + describe_bytes(own) +
                ") and the reserve for CUDA graphs (" + describe_bytes(in.reserve_bytes) +
                "): no room for a KV pool";
  if (in.context_tokens > 0) {
    const std::int64_t floor_blocks =
        ceil_div(std::min(in.context_tokens, kMinPoolTokens), in.block_size);
    if (p.blocks < floor_blocks) {
      const std::int64_t pool = floor_blocks * in.block_bytes;
      if (in.free_now - in.reserve_bytes >= pool) {
        p.blocks = floor_blocks;
        p.rule = "beyond the device share";
        p.refusal.clear();
      } else {
        p.refusal = "needs " + describe_bytes(own + pool + in.reserve_bytes) +
                    " of the device (weights and buffers " + describe_bytes(own) +
                    ", a KV pool of at least " + std::to_string(floor_blocks * in.block_size) +
                    " tokens " + describe_bytes(pool) + ", the reserve for CUDA graphs " +
                    describe_bytes(in.reserve_bytes) + ") but only " +
                    describe_bytes(own + in.free_now) + " was free for it";
      }
    }
  }
  return p;
}

std::string device_share_refusal(std::int64_t total_bytes, std::int64_t free_bytes,
                                 double fraction) {
  const auto share = static_cast<std::int64_t>(static_cast<double>(total_bytes) * fraction);
  if (free_bytes >= share) return {};
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.3g", fraction);
  return "needs its share of the device, " + std::string(frac) + " x " +
         describe_bytes(total_bytes) + " = " + describe_bytes(share) + ", but only " +
         describe_bytes(free_bytes) + " is free: " + describe_bytes(total_bytes - free_bytes) +
         " is held by other processes (other engines or programs on this GPU)";
}

std::int64_t offered_context(std::int64_t model_context, std::int64_t pool_tokens) {
  if (model_context <= 0) return pool_tokens;
  return std::min(model_context, pool_tokens);
}

std::optional<std::int64_t> host_mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  std::int64_t value = 0;
  while (f >> key >> value) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return value * 1024;  // kB
  }
  return std::nullopt;
}

}  // namespace keel
