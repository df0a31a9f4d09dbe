// The models a server knows, which of them have a live engine, and the memory budget
// they share. States per model:
//
//   available ──load──▶ loading ──hello──▶ ready ──unload──▶ unloading ──▶ available
//                          │                 │  ▲
//                          │ load error      │  └────── hello ─────┐
//                          ▼                 ▼ died / stalled      │
//                       available        restarting ───spawn───────┘
//
// Loading happens on first use (acquire) or on request (load). Before a load, idle
// unpinned models are unloaded least-recently-used first until the new one fits; a
// model that cannot fit raises Error(kResourceExhausted) (HTTP 507). The supervisor
// thread watches every engine: a dead process, a silent one, a step older than its
// deadline, or one that reads nothing from its socket (ipc_writer.h: a frame past its
// deadline, or a full queue with no byte taken for a second); the model goes `stalled`,
// its requests fail at once and its engine is killed
// (SIGKILL, reaped: the OS takes its memory back); it is restarted when it is
// pinned or requests wait for it, else it goes back to `available` and loads on next use.
//
// Memory (issue 21): before an engine starts, the registry plans the model's memory
// (registry/memory_plan.h: weights as stored, the KV pool, host tier) and budgets that.
// On the CPU the pool is sized here and passed down as --kv-blocks; each model may take
// its share of --memory-budget and of the RAM cap (ModelSettings::memory_fraction, else
// an even split over the models the server knows). On CUDA each engine gets a share of the device
// (--gpu-memory-fraction: explicit per model, else gpu_memory_fraction split evenly) and
// sizes its own pool within it; shares over 1.0 in all evict idle models or are refused.
// A model that cannot get its share is refused with 507 and the byte figures: what it
// needs and which models hold the rest.
//
// Step deadline: a fixed --step-deadline, or by default
//   max(step_deadline_floor, step_deadline_factor x the slowest step this model's
//   engines have completed so far)
// (30 s and 10 x by default): the slowest step seen is the largest step's work at this
// model's speed on this device, so a big model on a slow device gets a longer leash
// while a wedge on a fast one is caught at the floor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_api.h"
#include "engine/ipc/messages.h"
#include "registry/engine_process.h"
#include "registry/log.h"
#include "registry/memory_plan.h"
#include "registry/model_text.h"

namespace keel {

struct RegistryOptions {
  std::filesystem::path keel_executable;
  std::vector<std::string> engine_args;  // passed to every `keel engine`
  std::int64_t memory_budget_bytes = 0;  // 0: no budget
  // The pool rule's inputs for every model (device, block size, overrides, host tier);
  // budget_share and mem_available are filled per model.
  MemoryPlanOptions plan;
  double gpu_memory_fraction = kDefaultGpuMemoryFraction;  // CUDA: every engine's share together
  std::chrono::milliseconds load_timeout{600'000};
  // A step running longer is a stall; 0: scaled (see above).
  std::chrono::milliseconds step_deadline{0};
  std::chrono::milliseconds step_deadline_floor{30'000};
  double step_deadline_factor = 10.0;
  std::chrono::milliseconds heartbeat_timeout{10'000};  // no frame at all for this long
  // The queue of frames to each engine (ipc_writer.h): a submit the engine has not read
  // within ipc_frame_deadline (0: heartbeat_timeout) fails with 503 and counts as a stall,
  // like a full queue the engine reads nothing from.
  std::size_t ipc_queue_bytes = std::size_t{64} << 20;
  std::size_t ipc_queue_frames = 4096;
  std::chrono::milliseconds ipc_frame_deadline{0};
  std::chrono::milliseconds unload_grace{3'000};
  std::chrono::milliseconds idle_ttl{0};  // 0: keep loaded models (per model: ModelSettings)
  // A model that must evict another to fit waits this long (within its own deadline) for
  // a busy one to go idle before it is refused: a request that arrives as the other
  // model's last one is finishing is served, not turned away.
  std::chrono::milliseconds eviction_wait{5'000};
  std::chrono::milliseconds supervise_interval{100};
  Logger log;
};

// Per-model settings (--pin ID, --model-ttl ID=SECONDS, [model.ID] in the settings file).
struct ModelSettings {
  std::optional<bool> pinned;
  std::optional<std::chrono::milliseconds> idle_ttl;  // 0: never unload when idle
  // Share of the device (CUDA) or of --memory-budget (CPU), in (0, 1].
  std::optional<double> memory_fraction;
};

enum class ModelState { kAvailable, kLoading, kReady, kRestarting, kUnloading, kStalled };
const char *model_state_name(ModelState s);

// A model's runtime: its engine and text side while loaded. Leases keep it busy.
struct LoadedModel {
  std::string id;
  EngineApi *engine = nullptr;
  const ModelText *text = nullptr;
  ipc::ReadyInfo info;
  std::atomic<int> leases{0};
};

// Holds a model busy (not evictable) while a request uses it.
class ModelLease {
 public:
  ModelLease() = default;
  ModelLease(std::shared_ptr<LoadedModel> m, std::function<void()> on_release);
  ModelLease(ModelLease &&) noexcept = default;
  ModelLease &operator=(ModelLease &&) noexcept = default;
  ~ModelLease();
  LoadedModel *operator->() const { return model_.get(); }
  LoadedModel &operator*() const { return *model_; }
  explicit operator bool() const { return model_ != nullptr; }

 private:
  std::shared_ptr<LoadedModel> model_;
  std::function<void()> on_release_;
};

struct ModelReport {
  std::string id;
  std::filesystem::path path;
  ModelState state = ModelState::kAvailable;
  bool pinned = false;
  std::int64_t memory_bytes = 0;  // reported by the engine, else the estimate
  // The plan before load; once loaded, its parts as the engine allocated them.
  ModelMemoryPlan memory;
  double memory_fraction = 0.0;  // its share (see above)
  std::int64_t kv_block_size = 0;
  std::int64_t context_length = 0;
  std::string weights_format;  // as the engine holds them, once loaded ("q4_k+q6_k")
  std::int64_t pid = 0;
  std::int32_t restarts = 0;
  std::string last_error;
  double heartbeat_age_seconds = 0.0;  // since the front last heard from the engine
  // The queue of frames to the engine (ipc_writer.h): how long the engine has taken no
  // byte of it while frames wait (0: it keeps up), and how many wait.
  double ipc_blocked_seconds = 0.0;
  std::size_t ipc_queued_frames = 0;
  int leases = 0;
  std::optional<EngineStatus> engine;
  double step_deadline_seconds = 0.0;  // the deadline in force for this model's steps
  std::chrono::milliseconds idle_ttl{0};
  // The last state changes, oldest first: (state, seconds ago).
  std::vector<std::pair<ModelState, double>> history;
  // While loading or restarting: the engine's latest load progress (issue 22), or
  // "starting engine" before its first report; cleared once it is ready.
  struct Progress {
    LoadProgress latest;
    double elapsed_seconds = 0.0;        // since the engine was spawned
    double phase_elapsed_seconds = 0.0;  // since this phase began
    double started_at = 0.0;             // the spawn, in seconds since the Unix epoch
  };
  std::optional<Progress> progress;
};

class ModelRegistry {
 public:
  explicit ModelRegistry(RegistryOptions options);
  ~ModelRegistry();  // shutdown()
  // Refuses new work (waiting acquires throw kUnavailable), ends the requests still in
  // flight with `why`, then stops every engine (they flush and exit) within `grace`
  // (default unload_grace) plus a kill. Idempotent.
  void shutdown(std::optional<std::chrono::milliseconds> grace = std::nullopt,
                const std::string &why = "server is shutting down");

  // Adds a model (HF directory or .gguf file). Id: `id` when given, else the directory
  // name or file stem.
  std::string add_model(const std::filesystem::path &path, bool pinned = false,
                        const std::string &id = {});
  // Adds every HF directory (with config.json) and .gguf file directly under `dir`.
  void discover(const std::filesystem::path &dir);
  std::vector<std::string> ids() const;
  bool has(const std::string &id) const;
  void set_pinned(const std::string &id, bool pinned);
  void configure(const std::string &id, const ModelSettings &settings);

  // Loads the model if needed (waiting at most until `deadline`) and leases it.
  // Throws kNotFound, kResourceExhausted, kUnavailable or kTimeout.
  ModelLease acquire(const std::string &id, std::chrono::steady_clock::time_point deadline);
  // The model's tokenizer and template, loading them (not the engine) if needed.
  const ModelText &text(const std::string &id);
  // A lease on the model if its engine is ready now; never loads or waits.
  std::optional<ModelLease> try_lease(const std::string &id);
  // Leases on every model whose engine is ready now.
  std::vector<ModelLease> ready_leases();
  // Loads without leasing.
  void load(const std::string &id, std::chrono::steady_clock::time_point deadline);
  // Stops admission, ends requests in flight (abort, then kill past the grace period)
  // and frees the engine. Bounded by unload_grace plus a kill.
  void unload(const std::string &id);

  std::vector<ModelReport> report() const;
  std::int64_t memory_in_use() const;
  // Requests the engines are working on for the front (submitted, not yet finished).
  std::size_t requests_in_flight() const;
  std::int64_t memory_budget() const { return options_.memory_budget_bytes; }

 private:
  struct Entry;
  Entry &entry(const std::string &id);  // under mu_
  void start_loading(Entry &e, std::unique_lock<std::mutex> &lock,
                     std::chrono::steady_clock::time_point deadline);
  // Frees room for `target` under one rule (bytes of the budget, or shares of the device)
  // by evicting idle models, least recently used first; throws kResourceExhausted naming
  // what it needs and what holds the rest.
  struct RoomRule;
  void make_room(Entry &target, std::unique_lock<std::mutex> &lock,
                 std::chrono::steady_clock::time_point deadline, const RoomRule &rule);
  void stop_engine(Entry &e, std::unique_lock<std::mutex> &lock, const std::string &why);
  void supervise_loop();
  void supervise_once(std::unique_lock<std::mutex> &lock);
  void set_state(Entry &e, ModelState s);
  EngineLaunch launch_of(const Entry &e) const;
  double step_deadline_seconds(const Entry &e) const;
  ModelLease lease_of(Entry &e);
  double share_of(const Entry &e) const;
  ModelMemoryPlan plan_of(Entry &e) const;
  std::vector<std::string> launch_args(const Entry &e) const;

  RegistryOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  std::int64_t device_total_ = 0;  // CUDA: the device's bytes, once an engine reported them
  bool stopping_ = false;
  // Engines whose last lease ended on an engine client's own thread: freed later by the
  // supervisor, because a client cannot be destroyed on its own reader thread.
  std::mutex graveyard_mu_;
  std::vector<std::shared_ptr<EngineProcess>> graveyard_;
  std::thread supervisor_;
};

// "512M", "8G", "1.5GiB", "1000000" -> bytes. Throws Error(kInvalidArgument) naming `what`.
std::int64_t parse_size(const std::string &text, const std::string &what);

}  // namespace keel
