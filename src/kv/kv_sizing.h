// How many KV blocks an engine gets: plain integers in, a plan out (no device, no
// file), so the arithmetic is tested alone and the same rule runs in the registry (which
// budgets a model before its engine starts) and in the engine (which measures the device).
//
// On a GPU (vLLM's gpu_memory_utilization): the engine's share is `fraction` of the
// device's total memory. Everything the engine allocated before the KV pool (weights,
// activations, sampler workspace: free at open minus free now) comes out of that share,
// then a reserve for what is allocated later (CUDA graphs, cuBLAS workspace); the rest,
// rounded down to whole blocks, is the pool. An engine whose share is not free when it
// opens, or whose share is smaller than its weights and buffers, is refused with the
// byte figures: never an out-of-memory error mid-serving.
//
// On the CPU: enough for kHostDefaultSequences sequences of the model's full context
// (at least kHostMinDefaultTokens, the fixed default before, for short-context models),
// capped by the model's share of kHostRamFraction of MemAvailable (the pool's pages are
// committed as they are written, so this is what a full pool may take from the rest of
// the machine; several models split it as they split the budget) and,
// under --memory-budget, by the model's share of the budget minus its weights,
// workspace and host tier. A pool that cannot hold min(context, kMinPoolTokens) tokens
// is a refusal.
//
// Explicit --kv-blocks or --max-kv-tokens win over both rules, but a pool larger than
// the memory there is (free device memory, MemAvailable) is refused all the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace keel {

inline constexpr int kHostDefaultSequences = 4;
inline constexpr std::int64_t kHostMinDefaultTokens = 16384;
inline constexpr double kHostRamFraction = 0.5;
inline constexpr std::int64_t kMinPoolTokens = 2048;
inline constexpr double kDefaultGpuMemoryFraction = 0.9;
inline constexpr std::int64_t kDeviceReserveBytes = std::int64_t{512} << 20;
// Starts an engine's load error when its memory plan refused it: the registry answers
// such a load with 507 (kResourceExhausted), not 503.
inline constexpr const char *kMemoryRefusalTag = "insufficient memory: ";

// An explicit pool size (--kv-blocks wins over --max-kv-tokens); both 0: plan it.
struct KvOverride {
  std::int64_t blocks = 0;
  std::int64_t tokens = 0;
};

struct KvPlan {
  std::int64_t blocks = 0;
  std::int64_t block_bytes = 0;
  std::int64_t block_size = 0;
  std::int64_t tokens() const { return blocks * block_size; }
  std::int64_t bytes() const { return blocks * block_bytes; }
  // Empty when the pool fits; else why not, with the byte figures.
  std::string refusal;
  // How the size was chosen ("--kv-blocks", "4 x context", "MemAvailable", "budget",
  // "device share"), for logs and /api/status.
  std::string rule;
};

struct HostKvInputs {
  std::int64_t block_size = 16;
  std::int64_t block_bytes = 0;     // one block, all layers, K and V
  std::int64_t context_tokens = 0;  // the model's (or --max-model-len)
  std::int64_t mem_available = 0;   // /proc/meminfo MemAvailable; 0: unknown, no cap
  double ram_share = 1.0;           // this model's share of the RAM cap
  std::int64_t budget_share = 0;    // bytes of --memory-budget for this model; 0: no budget
  std::int64_t weights_bytes = 0;   // as stored
  std::int64_t other_bytes = 0;     // workspace + host tier
  KvOverride override_;
};
KvPlan plan_host_kv(const HostKvInputs &in);

struct DeviceKvInputs {
  std::int64_t block_size = 16;
  std::int64_t block_bytes = 0;
  std::int64_t total_bytes = 0;   // the device's memory
  std::int64_t free_at_open = 0;  // before this engine allocated anything
  std::int64_t free_now = 0;      // after weights and buffers, before the pool
  double fraction = kDefaultGpuMemoryFraction;
  std::int64_t reserve_bytes = kDeviceReserveBytes;
  KvOverride override_;
  // When set (the model's context), an engine whose weights and buffers leave its share
  // too small for a pool of min(context_tokens, kMinPoolTokens) tokens goes beyond the
  // share by what that pool needs, if the device has it free now (a mixture of experts
  // larger than an even split of the device); otherwise the refusal names the bytes it
  // needs. 0: the share is a hard limit.
  std::int64_t context_tokens = 0;
};
KvPlan plan_device_kv(const DeviceKvInputs &in);

// Why an engine cannot start on a device whose free memory is below its share
// (fraction x total), or empty. Checked before the weights load too, so that a share
// taken by another process is a 507 naming the bytes, not an out-of-memory crash.
std::string device_share_refusal(std::int64_t total_bytes, std::int64_t free_bytes,
                                 double fraction);

// The longest sequence an engine offers: the model's context (or --max-model-len),
// capped by what the pool holds for one sequence.
std::int64_t offered_context(std::int64_t model_context, std::int64_t pool_tokens);

// "1.50 GiB (1610612736 bytes)", "8.75 MiB (9175040 bytes)": both, so that a reader
// can add the figures up.
std::string describe_bytes(std::int64_t bytes);

// MemAvailable from /proc/meminfo, in bytes; nullopt when unreadable.
std::optional<std::int64_t> host_mem_available();

}  // namespace keel
