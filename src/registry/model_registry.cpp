#include "registry/model_registry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>

#include "core/error.h"
#include "registry/progress_log.h"

namespace keel {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char *model_state_name(ModelState s) {
  switch (s) {
    case ModelState::kAvailable:
      return "available";
    case ModelState::kLoading:
      return "loading";
    case ModelState::kReady:
      return "ready";
    case ModelState::kRestarting:
      return "restarting";
    case ModelState::kUnloading:
      return "unloading";
    case ModelState::kStalled:
      return "stalled";
  }
  return "unknown";
}

std::int64_t parse_size(const std::string &text, const std::string &what) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception &) {
    throw Error(ErrorCode::kInvalidArgument,
                what + ": '" + text + "' is not a size (e.g. 512M, 8G)");
  }
  std::string unit = text.substr(pos);
  for (auto &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'I') unit.pop_back();
  double mul = 1;
  if (unit == "K")
    mul = 1024.0;
  else if (unit == "M")
    mul = 1024.0 * 1024;
  else if (unit == "G")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    throw Error(ErrorCode::kInvalidArgument, what + ": unknown unit in '" + text + "'");
  if (!(v >= 0) || v * mul > 9e18)
    throw Error(ErrorCode::kInvalidArgument, what + ": '" + text + "' is out of range");
  return static_cast<std::int64_t>(v * mul);
}

namespace {

std::string share_text(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", f);
  return buf;
}

}  // namespace

struct ModelRegistry::Entry {
  std::string id;
  fs::path path;
  bool pinned = false;
  ModelState state = ModelState::kAvailable;
  std::unique_ptr<ModelText> text;
  std::optional<double> fraction;     // explicit share (ModelSettings::memory_fraction)
  std::optional<ModelConfig> config;  // read once, for the memory plan
  std::string config_error;
  ModelMemoryPlan plan;           // the last plan (what start_loading budgeted)
  std::vector<std::string> args;  // the engine's arguments, kept for restarts
  std::shared_ptr<EngineProcess> proc;
  std::shared_ptr<LoadedModel> loaded;
  std::int64_t weights = 0;   // bytes of the weight files, as stored
  std::int64_t estimate = 0;  // the planned total (weights alone when there is no plan)
  std::int64_t memory = 0;    // reported by the engine once ready
  Clock::time_point last_used{};
  Clock::time_point spawned_at{};
  Clock::time_point exited_seen{};  // when a loading engine's exit was first seen
  std::uint64_t attempt = 0;        // counts spawns, so waiters can tell their attempt failed
  std::int32_t restarts = 0;
  std::string last_error;
  int waiters = 0;            // acquires waiting for this model to become ready
  double slowest_step = 0.0;  // seconds, of any step its engines completed
  std::optional<std::chrono::milliseconds> idle_ttl;  // else the server's
  std::deque<std::pair<ModelState, Clock::time_point>> history;

  std::int64_t footprint() const { return memory > 0 ? std::max(memory, estimate) : estimate; }
};

void ModelRegistry::set_state(Entry &e, ModelState s) {
  if (e.state == s && !e.history.empty()) return;
  e.state = s;
  e.history.emplace_back(s, Clock::now());
  while (e.history.size() > 12) e.history.pop_front();
}

double ModelRegistry::step_deadline_seconds(const Entry &e) const {
  if (options_.step_deadline.count() > 0) return options_.step_deadline.count() / 1000.0;
  return std::max(options_.step_deadline_floor.count() / 1000.0,
                  options_.step_deadline_factor * e.slowest_step);
}

EngineLaunch ModelRegistry::launch_of(const Entry &e) const {
  EngineLaunch launch{options_.keel_executable, e.path, e.args, {}};
  launch.ipc.model = e.id;
  // The engine's load progress in the log: a few lines per phase (registry/progress_log.h),
  // paced on the client's reader thread, which sees every frame.
  launch.ipc.on_progress = [log = options_.log, id = e.id, since = Clock::now(),
                            pacer = std::make_shared<ProgressLogPacer>()](const LoadProgress &p) {
    const auto now = Clock::now();
    if (pacer->should_log(p, now))
      log.log(LogLevel::kInfo, "loading '%s': %s, %.1f s", id.c_str(), describe_progress(p).c_str(),
              std::chrono::duration<double>(now - since).count());
  };
  launch.ipc.limits.max_bytes = options_.ipc_queue_bytes;
  launch.ipc.limits.max_frames = options_.ipc_queue_frames;
  launch.ipc.limits.frame_deadline = options_.ipc_frame_deadline.count() > 0
                                         ? options_.ipc_frame_deadline
                                         : options_.heartbeat_timeout;
  return launch;
}

ModelLease::ModelLease(std::shared_ptr<LoadedModel> m, std::function<void()> on_release)
    : model_(std::move(m)), on_release_(std::move(on_release)) {
  model_->leases++;
}

ModelLease::~ModelLease() {
  if (model_) {
    model_->leases--;
    if (on_release_) on_release_();
  }
}

ModelRegistry::ModelRegistry(RegistryOptions options) : options_(std::move(options)) {
  supervisor_ = std::thread([this] { supervise_loop(); });
}

ModelRegistry::~ModelRegistry() { shutdown(); }

void ModelRegistry::shutdown(std::optional<std::chrono::milliseconds> grace,
                             const std::string &why) {
  std::vector<std::shared_ptr<EngineProcess>> procs;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto &[id, e] : entries_) {
      if (e->proc) procs.push_back(std::move(e->proc));
      e->loaded.reset();
      set_state(*e, ModelState::kAvailable);
    }
  }
  cv_.notify_all();
  supervisor_.join();
  // Every engine at once, under one deadline: N engines take one grace, not N.
  for (auto &p : procs) p->client().fail_all(why);
  for (auto &p : procs) p->client().request_shutdown();
  const auto until = Clock::now() + grace.value_or(options_.unload_grace);
  for (auto &p : procs)
    p->shutdown(
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now())));
  {
    std::lock_guard g(graveyard_mu_);
    graveyard_.clear();
  }
}

std::string ModelRegistry::add_model(const fs::path &path, bool pinned,
                                     const std::string &given_id) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(ErrorCode::kNotFound, path.string() + ": no such model file or directory");
  fs::path p = fs::absolute(path, ec);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  std::string id = !given_id.empty()         ? given_id
                   : fs::is_directory(p, ec) ? p.filename().string()
                                             : p.stem().string();
  std::lock_guard lock(mu_);
  auto &slot = entries_[id];
  if (!slot) {
    slot = std::make_unique<Entry>();
    slot->id = id;
    slot->path = p;
    slot->weights = slot->estimate = weight_file_bytes(p);
  }
  slot->pinned = slot->pinned || pinned;
  return id;
}

void ModelRegistry::discover(const fs::path &dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::kNotFound, "--model-dir: " + dir.string() + " is not a directory");
  std::vector<fs::path> found;
  for (const auto &f : fs::directory_iterator(dir, ec)) {
    if (f.is_directory(ec) && fs::exists(f.path() / "config.json", ec))
      found.push_back(f.path());
    else if (f.is_regular_file(ec) && f.path().extension() == ".gguf")
      found.push_back(f.path());
  }
  std::sort(found.begin(), found.end());
  for (const auto &p : found) add_model(p);
}

std::vector<std::string> ModelRegistry::ids() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto &[id, e] : entries_) out.push_back(id);
  return out;
}

bool ModelRegistry::has(const std::string &id) const {
  std::lock_guard lock(mu_);
  return entries_.count(id) > 0;
}

void ModelRegistry::set_pinned(const std::string &id, bool pinned) {
  std::lock_guard lock(mu_);
  entry(id).pinned = pinned;
}

void ModelRegistry::configure(const std::string &id, const ModelSettings &settings) {
  std::lock_guard lock(mu_);
  Entry &e = entry(id);
  if (settings.pinned) e.pinned = *settings.pinned;
  if (settings.idle_ttl) e.idle_ttl = *settings.idle_ttl;
  if (settings.memory_fraction) {
    const double f = *settings.memory_fraction;
    if (!(f > 0 && f <= 1))
      throw Error(ErrorCode::kInvalidArgument,
                  "--gpu-memory-fraction: " + id + "=" + share_text(f) + " must be in (0, 1]");
    e.fraction = f;
  }
}

double ModelRegistry::share_of(const Entry &e) const {
  if (e.fraction) return *e.fraction;
  // What the explicit shares leave, split evenly over the other models.
  double pool = options_.plan.cuda ? options_.gpu_memory_fraction : 1.0;
  int others = 0;
  for (const auto &[id, x] : entries_) {
    if (x->fraction)
      pool -= *x->fraction;
    else
      ++others;
  }
  return others > 0 ? std::max(pool, 0.0) / others : 0.0;
}

ModelMemoryPlan ModelRegistry::plan_of(Entry &e) const {
  if (!e.config && e.config_error.empty()) {
    try {
      e.config = read_model_config(e.path);
    } catch (const std::exception &err) {
      e.config_error = err.what();  // the engine will fail its load with this
    }
  }
  if (!e.config) return ModelMemoryPlan{};
  MemoryPlanOptions o = options_.plan;
  if (!o.cuda) {
    o.mem_available = host_mem_available().value_or(0);
    o.ram_share = std::max(share_of(e), 1e-6);
    if (options_.memory_budget_bytes > 0)
      o.budget_share = static_cast<std::int64_t>(static_cast<double>(options_.memory_budget_bytes) *
                                                 share_of(e));
  }
  return plan_model_memory(*e.config, e.weights, o);
}

std::vector<std::string> ModelRegistry::launch_args(const Entry &e) const {
  std::vector<std::string> args = options_.engine_args;
  const MemoryPlanOptions &o = options_.plan;
  auto add = [&](const char *flag, const std::string &v) {
    args.push_back(flag);
    args.push_back(v);
  };
  add("--block-size", std::to_string(o.block_size));
  if (o.max_model_len > 0) add("--max-model-len", std::to_string(o.max_model_len));
  if (o.cuda) {
    if (o.kv.blocks > 0) add("--kv-blocks", std::to_string(o.kv.blocks));
    if (o.kv.tokens > 0) add("--max-kv-tokens", std::to_string(o.kv.tokens));
    add("--gpu-memory-fraction", share_text(share_of(e)));
  } else if (e.plan.known) {
    add("--kv-blocks", std::to_string(e.plan.kv_blocks));  // exactly what was budgeted
  } else {
    if (o.kv.blocks > 0) add("--kv-blocks", std::to_string(o.kv.blocks));
    if (o.kv.tokens > 0) add("--max-kv-tokens", std::to_string(o.kv.tokens));
  }
  return args;
}

ModelLease ModelRegistry::lease_of(Entry &e) {
  e.last_used = Clock::now();
  return ModelLease(e.loaded, [this, &e] {
    std::lock_guard l(mu_);
    e.last_used = Clock::now();
    cv_.notify_all();  // a load waiting in make_room may now evict this model
  });
}

std::optional<ModelLease> ModelRegistry::try_lease(const std::string &id) {
  std::lock_guard lock(mu_);
  Entry &e = entry(id);
  if (stopping_ || e.state != ModelState::kReady || !e.loaded) return std::nullopt;
  return lease_of(e);
}

std::vector<ModelLease> ModelRegistry::ready_leases() {
  std::lock_guard lock(mu_);
  std::vector<ModelLease> out;
  if (stopping_) return out;
  for (auto &[id, e] : entries_)
    if (e->state == ModelState::kReady && e->loaded) out.push_back(lease_of(*e));
  return out;
}

ModelRegistry::Entry &ModelRegistry::entry(const std::string &id) {
  auto it = entries_.find(id);
  if (it == entries_.end())
    throw Error(ErrorCode::kNotFound, "model: '" + id + "' is not a model this server knows");
  return *it->second;
}

// One way of counting room: bytes of the memory budget, or shares of the device.
struct ModelRegistry::RoomRule {
  std::function<double(const Entry &)> amount;
  double capacity = 0;
  std::function<std::string(double)> show;
  const char *of_what = "";
};

void ModelRegistry::make_room(Entry &target, std::unique_lock<std::mutex> &lock,
                              Clock::time_point deadline, const RoomRule &rule) {
  const double need = rule.amount(target);
  const double slack = rule.capacity * 1e-9;  // shares are sums of decimals
  if (need > rule.capacity + slack)
    throw Error(ErrorCode::kResourceExhausted,
                "model '" + target.id + "' needs " + rule.show(need) + ", more than the whole " +
                    rule.of_what + " of " + rule.show(rule.capacity));
  const Clock::time_point wait_end = std::min(deadline, Clock::now() + options_.eviction_wait);
  for (;;) {
    double used = 0;
    std::string holders;
    for (const auto &[id, e] : entries_) {
      if (!e->proc || e.get() == &target) continue;
      used += rule.amount(*e);
      holders += (holders.empty() ? "'" : ", '") + id + "' " + rule.show(rule.amount(*e));
      if (e->pinned) holders += " (pinned)";
    }
    if (used + need <= rule.capacity + slack) return;
    Entry *victim = nullptr;
    bool busy = false;  // a model that would be a victim once its requests end
    for (const auto &[id, e] : entries_) {
      if (e.get() == &target || e->state != ModelState::kReady || e->pinned) continue;
      if (e->loaded && (e->loaded->leases > 0 || e->proc->client().in_flight() > 0)) {
        busy = true;
        continue;
      }
      if (!victim || e->last_used < victim->last_used) victim = e.get();
    }
    if (!victim && busy && Clock::now() < wait_end) {
      // A lease's release wakes us; the engine's in-flight count is polled.
      cv_.wait_until(lock, std::min(wait_end, Clock::now() + std::chrono::milliseconds(20)));
      if (stopping_) throw Error(ErrorCode::kUnavailable, "server is shutting down");
      continue;
    }
    if (!victim)
      throw Error(ErrorCode::kResourceExhausted,
                  "model '" + target.id + "' needs " + rule.show(need) + " but " + rule.show(used) +
                      " of the " + rule.show(rule.capacity) + " " + rule.of_what +
                      " is held by models that are busy or pinned: " + holders);
    options_.log.log(LogLevel::kInfo, "unloading '%s' (least recently used) to make room for '%s'",
                     victim->id.c_str(), target.id.c_str());
    stop_engine(*victim, lock, "model unloaded to make room for '" + target.id + "'");
  }
}

void ModelRegistry::start_loading(Entry &e, std::unique_lock<std::mutex> &lock,
                                  Clock::time_point deadline) {
  // First: a model that cannot get its share is refused before any work.
  if ((options_.plan.cuda || options_.memory_budget_bytes > 0) && share_of(e) <= 0)
    throw Error(ErrorCode::kResourceExhausted,
                "model '" + e.id + "' has no share of the " +
                    (options_.plan.cuda ? "device" : "memory budget") +
                    " left: the other models' --gpu-memory-fraction ID=F shares take all of it");
  e.plan = plan_of(e);
  if (!e.plan.refusal.empty())
    throw Error(ErrorCode::kResourceExhausted, "model '" + e.id + "' " + e.plan.refusal);
  if (e.plan.known) e.estimate = e.plan.total_bytes();
  if (options_.memory_budget_bytes > 0) {
    RoomRule bytes;
    bytes.amount = [](const Entry &x) { return static_cast<double>(x.footprint()); };
    bytes.capacity = static_cast<double>(options_.memory_budget_bytes);
    bytes.show = [](double b) { return describe_bytes(static_cast<std::int64_t>(b)); };
    bytes.of_what = "memory budget";
    make_room(e, lock, deadline, bytes);
  }
  if (options_.plan.cuda) {
    RoomRule device;
    device.amount = [this](const Entry &x) { return share_of(x); };
    device.capacity = 1.0;
    device.show = [this](double f) {
      std::string t = share_text(f) + " of the GPU";
      if (device_total_ > 0)
        t += " (" +
             describe_bytes(static_cast<std::int64_t>(f * static_cast<double>(device_total_))) +
             ")";
      return t;
    };
    device.of_what = "device";
    make_room(e, lock, deadline, device);
  }
  if (!e.text) e.text = load_model_text(e.path);  // once per model; survives engine restarts
  if (e.state != ModelState::kAvailable) return;  // someone else started it while we waited
  e.args = launch_args(e);
  e.proc = EngineProcess::spawn(launch_of(e));
  options_.log.log(LogLevel::kDebug, "loading '%s': engine pid %d", e.id.c_str(),
                   static_cast<int>(e.proc->pid()));
  set_state(e, ModelState::kLoading);
  e.spawned_at = Clock::now();
  e.exited_seen = {};
  e.attempt++;
  e.last_error.clear();
}

void ModelRegistry::stop_engine(Entry &e, std::unique_lock<std::mutex> &lock,
                                const std::string &why) {
  auto proc = std::move(e.proc);
  e.loaded.reset();
  e.memory = 0;
  if (!proc) {
    set_state(e, ModelState::kAvailable);
    return;
  }
  set_state(e, ModelState::kUnloading);
  lock.unlock();
  proc->client().fail_all(why);  // ends streams at once; the child aborts its side
  proc->shutdown(options_.unload_grace);
  lock.lock();
  set_state(e, ModelState::kAvailable);
  cv_.notify_all();
}

ModelLease ModelRegistry::acquire(const std::string &id, Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  Entry &e = entry(id);
  std::uint64_t my_attempt = 0;
  for (;;) {
    if (stopping_) throw Error(ErrorCode::kUnavailable, "server is shutting down");
    if (e.state == ModelState::kReady && e.loaded) return lease_of(e);
    if (e.state == ModelState::kAvailable) {
      if (my_attempt != 0 && e.attempt == my_attempt && !e.last_error.empty())
        throw Error(e.last_error.find(kMemoryRefusalTag) != std::string::npos
                        ? ErrorCode::kResourceExhausted
                        : ErrorCode::kUnavailable,
                    "model '" + id + "' failed to load: " + e.last_error);
      start_loading(e, lock, deadline);
      my_attempt = e.attempt;
      continue;
    }
    e.waiters++;  // a stalled engine with waiters is restarted for them
    const auto woke = cv_.wait_until(lock, deadline);
    e.waiters--;
    if (woke == std::cv_status::timeout && e.state != ModelState::kReady)
      throw Error(ErrorCode::kTimeout, "model '" + id + "' is " + model_state_name(e.state) +
                                           " and was not ready in time");
  }
}

const ModelText &ModelRegistry::text(const std::string &id) {
  std::lock_guard lock(mu_);
  Entry &e = entry(id);
  if (!e.text) e.text = load_model_text(e.path);
  return *e.text;  // never replaced once loaded
}

void ModelRegistry::load(const std::string &id, Clock::time_point deadline) {
  acquire(id, deadline);
}

void ModelRegistry::unload(const std::string &id) {
  std::unique_lock lock(mu_);
  Entry &e = entry(id);
  stop_engine(e, lock, "model '" + id + "' was unloaded");
}

void ModelRegistry::supervise_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    supervise_once(lock);
    cv_.wait_for(lock, options_.supervise_interval, [&] { return stopping_; });
  }
}

void ModelRegistry::supervise_once(std::unique_lock<std::mutex> &lock) {
  {
    std::vector<std::shared_ptr<EngineProcess>> dead;
    {
      std::lock_guard g(graveyard_mu_);
      dead.swap(graveyard_);
    }
    lock.unlock();
    dead.clear();
    lock.lock();
  }
  const auto now = Clock::now();
  for (auto &[id, ep] : entries_) {
    Entry &e = *ep;
    if (!e.proc) continue;
    auto &client = e.proc->client();
    std::string how;
    if (e.state == ModelState::kLoading || e.state == ModelState::kRestarting) {
      if (auto info = client.ready_info()) {
        auto m = std::make_shared<LoadedModel>();
        m->id = e.id;
        m->engine = &client;
        m->text = e.text.get();
        m->info = *info;
        // The lease keeps the process alive: a request in flight never sees a freed client.
        auto keep = e.proc;
        e.loaded = std::shared_ptr<LoadedModel>(m.get(), [this, m, keep](LoadedModel *) mutable {
          std::lock_guard g(graveyard_mu_);
          graveyard_.push_back(std::move(keep));
        });
        e.memory = info->memory_bytes;
        if (info->device_total_bytes > 0) device_total_ = info->device_total_bytes;
        options_.log.log(LogLevel::kInfo, "'%s' ready: engine pid %lld on %s, %.1f s after spawn",
                         e.id.c_str(), static_cast<long long>(info->pid), info->backend.c_str(),
                         std::chrono::duration<double>(now - e.spawned_at).count());
        set_state(e, ModelState::kReady);
        e.last_used = now;
        cv_.notify_all();
      } else if (client.dead() || e.proc->exited(&how)) {
        // A child that exited may still have its last frame (the load error, which says
        // whether memory refused it: 507) in the socket: the reader reaches EOF right
        // after it, so wait for that, a second at most, before judging the exit.
        if (!client.dead()) {
          if (e.exited_seen == Clock::time_point{}) e.exited_seen = now;
          if (now - e.exited_seen < std::chrono::seconds(1)) continue;
        }
        e.proc->exited(&how);  // the exit status, when it is already known
        e.last_error = client.dead() ? client.dead_reason() : "engine process " + how;
        if (client.dead() && !how.empty()) e.last_error += " (" + how + ")";
        auto proc = std::move(e.proc);
        set_state(e, ModelState::kAvailable);
        const std::string why = e.last_error;
        lock.unlock();
        proc->kill(why);
        lock.lock();
        cv_.notify_all();
        return;  // the map may have changed while unlocked
      } else if (now - e.spawned_at > options_.load_timeout) {
        e.last_error = "loading took longer than " +
                       std::to_string(options_.load_timeout.count() / 1000) + " s";
        auto proc = std::move(e.proc);
        set_state(e, ModelState::kAvailable);
        const std::string why = e.last_error;
        lock.unlock();
        proc->kill(why);
        lock.lock();
        cv_.notify_all();
        return;
      }
      continue;
    }
    if (e.state != ModelState::kReady) continue;
    const double heard = client.seconds_since_heard();
    const EngineStatus st = client.status();
    const double step_age =
        st.step_in_progress_seconds > 0 ? st.step_in_progress_seconds + heard : 0.0;
    e.slowest_step = std::max(e.slowest_step, st.last_step_seconds);
    const double deadline = step_deadline_seconds(e);
    std::string why;
    if (client.dead() || e.proc->exited(&how)) {
      e.proc->exited(&how);
      why = "engine for model '" + e.id + "' died (" + (how.empty() ? client.dead_reason() : how) +
            ")";
    } else if (std::string stall = client.write_stall(); !stall.empty()) {
      why = "engine for model '" + e.id + "' stalled: " + stall;  // it does not read its socket
    } else if (heard * 1000 > options_.heartbeat_timeout.count()) {
      why = "engine for model '" + e.id + "' stalled: no heartbeat for " +
            std::to_string(static_cast<int>(heard)) + " s";
    } else if (step_age > deadline) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "a step has run for %.1f s, past its deadline of %.1f s",
                    step_age, deadline);
      why = "engine for model '" + e.id + "' stalled: " + buf;
    }
    if (!why.empty()) {
      auto proc = std::move(e.proc);
      const pid_t pid = proc->pid();
      e.loaded.reset();
      e.memory = 0;
      set_state(e, ModelState::kStalled);
      e.last_error = why;
      options_.log.log(LogLevel::kError, "%s; killing engine pid %d", why.c_str(),
                       static_cast<int>(pid));
      lock.unlock();
      proc->kill(why);  // fails its requests at once, then SIGKILL and reap
      const bool reaped = proc->exited();
      proc.reset();
      lock.lock();
      options_.log.log(reaped ? LogLevel::kInfo : LogLevel::kError, "engine pid %d for '%s' %s",
                       static_cast<int>(pid), e.id.c_str(),
                       reaped ? "is gone (its memory is back with the system)"
                              : "did not die after SIGKILL (uninterruptible?)");
      if (stopping_) return;
      if (!e.pinned && e.waiters == 0) {
        // Nobody needs it now: the next request loads it again.
        set_state(e, ModelState::kAvailable);
        options_.log.log(
            LogLevel::kInfo,
            "'%s' not restarted (not pinned, no request waiting); it loads on next use",
            e.id.c_str());
        cv_.notify_all();
        return;
      }
      options_.log.log(LogLevel::kInfo, "restarting the engine for '%s'", e.id.c_str());
      e.restarts++;
      try {
        e.proc = EngineProcess::spawn(launch_of(e));
        set_state(e, ModelState::kRestarting);
        e.spawned_at = Clock::now();
        e.exited_seen = {};
        e.attempt++;
      } catch (const Error &err) {
        set_state(e, ModelState::kAvailable);
        e.last_error = err.what();
      }
      cv_.notify_all();
      return;
    }
    const auto ttl = e.idle_ttl.value_or(options_.idle_ttl);
    if (ttl.count() > 0 && !e.pinned && e.loaded && e.loaded->leases == 0 &&
        client.in_flight() == 0 && now - e.last_used > ttl) {
      options_.log.log(LogLevel::kInfo, "unloading idle model '%s'", e.id.c_str());
      stop_engine(e, lock, "model '" + e.id + "' unloaded after its idle time");
      return;
    }
  }
}

std::vector<ModelReport> ModelRegistry::report() const {
  std::lock_guard lock(mu_);
  std::vector<ModelReport> out;
  for (const auto &[id, e] : entries_) {
    ModelReport r;
    r.id = id;
    r.path = e->path;
    r.state = e->state;
    r.pinned = e->pinned;
    r.memory_bytes = e->footprint();
    r.memory_fraction = share_of(*e);
    r.memory = e->plan.known || e->proc ? e->plan : plan_of(*e);
    r.context_length = r.memory.context_length;
    r.restarts = e->restarts;
    r.last_error = e->last_error;
    if (e->loaded) {
      const ipc::ReadyInfo &info = e->loaded->info;
      r.context_length = info.context_length;
      r.memory.weights_bytes = info.weights_bytes;
      r.memory.kv_bytes = info.kv_bytes;
      r.memory.workspace_bytes = info.workspace_bytes;
      r.memory.host_tier_bytes = info.host_tier_bytes;
      // On the CPU the registry chose the pool (the engine only saw --kv-blocks).
      if (options_.plan.cuda || !e->plan.known) r.memory.rule = info.kv_rule;
      r.kv_block_size = info.kv_block_size;
      r.weights_format = info.weights_format;
      r.pid = e->loaded->info.pid;
      r.leases = e->loaded->leases;
    }
    if (e->proc && e->state == ModelState::kReady) {
      r.engine = e->proc->client().status();
      r.heartbeat_age_seconds = e->proc->client().seconds_since_heard();
      const auto ipc = e->proc->client().write_stats();
      r.ipc_blocked_seconds = ipc.blocked_seconds;
      r.ipc_queued_frames = ipc.frames;
    }
    r.step_deadline_seconds = step_deadline_seconds(*e);
    r.idle_ttl = e->idle_ttl.value_or(options_.idle_ttl);
    const auto now = Clock::now();
    if (e->proc && (e->state == ModelState::kLoading || e->state == ModelState::kRestarting)) {
      ModelReport::Progress p;
      p.latest.phase = "starting engine";
      p.elapsed_seconds = std::chrono::duration<double>(now - e->spawned_at).count();
      p.phase_elapsed_seconds = p.elapsed_seconds;
      if (auto got = e->proc->client().load_progress()) {
        p.latest = got->latest;
        p.phase_elapsed_seconds = std::chrono::duration<double>(now - got->phase_since).count();
      }
      p.started_at =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count() -
          p.elapsed_seconds;
      r.progress = std::move(p);
    }
    for (const auto &[st, at] : e->history)
      r.history.emplace_back(st, std::chrono::duration<double>(now - at).count());
    out.push_back(std::move(r));
  }
  return out;
}

std::size_t ModelRegistry::requests_in_flight() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto &[id, e] : entries_)
    if (e->proc) n += e->proc->client().in_flight();
  return n;
}

std::int64_t ModelRegistry::memory_in_use() const {
  std::lock_guard lock(mu_);
  std::int64_t used = 0;
  for (const auto &[id, e] : entries_)
    if (e->proc) used += e->footprint();
  return used;
}

}  // namespace keel
