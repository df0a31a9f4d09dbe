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
// thread watches every engine: a dead process or a step older than its deadline fails
// that engine's requests at once, kills it and restarts it.
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
#include "engine/ipc_messages.h"
#include "registry/engine_process.h"
#include "registry/model_text.h"

namespace keel {

struct RegistryOptions {
  std::filesystem::path keel_executable;
  std::vector<std::string> engine_args;  // passed to every `keel engine`
  std::int64_t memory_budget_bytes = 0;  // 0: no budget
  std::chrono::milliseconds load_timeout{600'000};
  std::chrono::milliseconds step_deadline{60'000};      // a step running longer is a stall
  std::chrono::milliseconds heartbeat_timeout{10'000};  // no frame at all for this long
  std::chrono::milliseconds unload_grace{3'000};
  std::chrono::milliseconds idle_ttl{0};  // 0: keep loaded models
  std::chrono::milliseconds supervise_interval{100};
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
  std::int64_t context_length = 0;
  std::int64_t pid = 0;
  std::int32_t restarts = 0;
  std::string last_error;
  double heartbeat_age_seconds = 0.0;  // since the front last heard from the engine
  int leases = 0;
  std::optional<EngineStatus> engine;
};

class ModelRegistry {
 public:
  explicit ModelRegistry(RegistryOptions options);
  ~ModelRegistry();  // shutdown()
  // Refuses new work (waiting acquires throw kUnavailable), then stops every engine,
  // each within unload_grace plus a kill. Idempotent.
  void shutdown();

  // Adds a model (HF directory or .gguf file). Id: the directory name or file stem.
  std::string add_model(const std::filesystem::path &path, bool pinned = false);
  // Adds every HF directory (with config.json) and .gguf file directly under `dir`.
  void discover(const std::filesystem::path &dir);
  std::vector<std::string> ids() const;
  bool has(const std::string &id) const;
  void set_pinned(const std::string &id, bool pinned);

  // Loads the model if needed (waiting at most until `deadline`) and leases it.
  // Throws kNotFound, kResourceExhausted, kUnavailable or kTimeout.
  ModelLease acquire(const std::string &id, std::chrono::steady_clock::time_point deadline);
  // The model's tokenizer and template, loading them (not the engine) if needed.
  const ModelText &text(const std::string &id);
  // Loads without leasing.
  void load(const std::string &id, std::chrono::steady_clock::time_point deadline);
  // Stops admission, ends requests in flight (abort, then kill past the grace period)
  // and frees the engine. Bounded by unload_grace plus a kill.
  void unload(const std::string &id);

  std::vector<ModelReport> report() const;
  std::int64_t memory_in_use() const;
  std::int64_t memory_budget() const { return options_.memory_budget_bytes; }

 private:
  struct Entry;
  Entry &entry(const std::string &id);  // under mu_
  void start_loading(Entry &e, std::unique_lock<std::mutex> &lock);
  void make_room(Entry &target, std::unique_lock<std::mutex> &lock);
  void stop_engine(Entry &e, std::unique_lock<std::mutex> &lock, const std::string &why);
  void supervise_loop();
  void supervise_once(std::unique_lock<std::mutex> &lock);

  RegistryOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
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
