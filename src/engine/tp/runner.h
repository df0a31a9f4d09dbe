// The ModelRunner of rank 0 of a CPU tensor-parallel group. The engine drives it like
// any runner; underneath, each forward is broadcast to the workers and computed by
// every rank on its shard (exec/parallel/shard_plan.h), and each KV operation is done
// by every rank on its KV heads.
//
// KV block images (save/load, for the cache tiers) are in the single-rank layout,
// [layers][K|V][block_size][kv_heads][head_dim], gathered from and scattered to the
// ranks, so cached blocks stay valid whatever the group's size.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "engine/tp/group.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/model_runner.h"

namespace keel::tp {

struct TpRunnerOptions {
  std::filesystem::path model;
  int size = 2;
  int threads_per_rank = 0;  // 0: hardware threads / size (at least 1)
  cpu::KvOptions kv;
  TpLaunch launch = default_tp_launch();
  std::chrono::milliseconds op_timeout{60000};
  std::chrono::milliseconds load_timeout{600000};
  std::function<void(const std::string &why)> on_lost;  // see TpGroupOptions
};

// Threads for each rank's pool when `threads` (0: all) are shared by `size` ranks.
int threads_per_rank(int threads, int size);

class TpCpuRunner;

class TpKvStore final : public KvBlockStore {
 public:
  explicit TpKvStore(TpCpuRunner &runner) : runner_(runner) {}
  std::int32_t num_blocks() const override;
  std::int32_t block_size() const override;
  std::size_t block_bytes() const override;
  void copy_block(std::int32_t src, std::int32_t dst) override;
  void save_block(std::int32_t block, std::span<std::byte> host_out) override;
  void load_block(std::int32_t block, std::span<const std::byte> host_in) override;

 private:
  TpCpuRunner &runner_;
};

class TpCpuRunner final : public ModelRunner {
 public:
  // Spawns the workers, loads rank 0's shard and waits for theirs. `ctx` is rank 0's
  // (size its pool with threads_per_rank). Throws the first rank's load error.
  TpCpuRunner(const TpRunnerOptions &options, ExecContext &ctx);
  ~TpCpuRunner() override;

  const ModelConfig &config() const override { return local_->config(); }
  std::string weight_format() const override { return local_->weight_format(); }
  KvBlockStore &kv() override { return kv_; }
  void forward(const ForwardBatch &batch, ForwardOutput &out) override;

  TpGroup &group() { return *group_; }

 private:
  friend class TpKvStore;
  std::unique_ptr<TpGroup> group_;  // first: outlives the runner that uses its communicator
  std::unique_ptr<cpu::CpuModelRunner> local_;
  TpKvStore kv_{*this};
  std::string message_;  // reused command buffer
};

}  // namespace keel::tp
