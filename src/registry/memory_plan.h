// A model's memory before its engine starts: weights as stored, the KV pool the rule of
// kv/kv_sizing.h gives it, the host tier, and the context it will offer. The registry
// budgets a model with this plan (and refuses one that does not fit, with the figures)
// and passes the pool size down, so the engine allocates what was budgeted.
//
// CPU: the pool is planned here (HostKvInputs), from the model's config, MemAvailable and
// the model's share of --memory-budget. CUDA: the engine sizes its pool on the device
// (plan_device_kv), so the plan holds the weights and the context the model offers
// (capped at what the CUDA runner supports); the pool shows once the engine reports it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "formats/model_config.h"
#include "kv/kv_sizing.h"

namespace keel {

struct MemoryPlanOptions {
  bool cuda = false;
  std::int64_t block_size = 16;
  std::int64_t max_model_len = 0;  // 0: the model's
  KvOverride kv;
  std::int64_t host_tier_bytes = 0;  // --hot-cache-size
  std::int64_t budget_share = 0;     // CPU: bytes of --memory-budget this model may take
  std::int64_t mem_available = 0;    // CPU: MemAvailable (0: unknown, no cap)
  double ram_share = 1.0;            // CPU: this model's share of the RAM cap
};

struct ModelMemoryPlan {
  bool known = false;  // false: the config could not be read (the engine will say why)
  std::int64_t weights_bytes = 0;
  std::int64_t kv_bytes = 0;  // 0 on CUDA until the engine reports its pool
  std::int64_t kv_blocks = 0;
  std::int64_t kv_tokens = 0;
  std::int64_t workspace_bytes = 0;  // not planned on the CPU (allocated per step)
  std::int64_t host_tier_bytes = 0;
  std::int64_t model_context = 0;   // the model's own (or --max-model-len)
  std::int64_t context_length = 0;  // what it will offer: capped by one sequence's room
  std::string rule;                 // how the pool was sized
  std::string refusal;              // non-empty: the model cannot get its share
  std::int64_t total_bytes() const {
    return weights_bytes + kv_bytes + workspace_bytes + host_tier_bytes;
  }
};

// The config of an HF directory or GGUF file (no weights are read).
ModelConfig read_model_config(const std::filesystem::path &path);
// Bytes of the weight files (.safetensors, .gguf, .bin) as stored.
std::int64_t weight_file_bytes(const std::filesystem::path &path);
// Bytes of one CPU KV block (f32, every layer; K and V, or MLA's latent row:
// kv_values_per_token_layer).
std::int64_t cpu_block_bytes(const ModelConfig &config, std::int64_t block_size);
// The longest context the CUDA runner takes (CudaRunnerOptions::max_model_len's cap).
inline constexpr std::int64_t kCudaMaxContext = 131072;

ModelMemoryPlan plan_model_memory(const ModelConfig &config, std::int64_t weights_bytes,
                                  const MemoryPlanOptions &options);

}  // namespace keel
