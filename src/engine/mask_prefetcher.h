// Computes a step's structured-output masks while its forward pass runs (issue 17;
// docs/ARCHITECTURE.md, "Constrained decoding"). The engine thread posts the step's
// constrained rows just before the forward; a dedicated worker starts on them at once.
// After the forward, finish() has the engine thread and its pool take the rows the
// worker has not started (so a step's masks are made in parallel, never one after the
// other on the engine thread) and waits, by a deadline, for the rows in flight.
//
// No-hang rules: the worker never touches the runner or the device; a wait past its
// deadline is Error(kTimeout) (the step fails, the watchdog sees its age). Jobs own
// their constraints, so a request finished while its mask is still being computed
// (a failed step) leaves nothing dangling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/ids.h"
#include "core/output_constraint.h"

namespace keel {

class ThreadPool;

class MaskPrefetcher {
 public:
  struct Job {
    std::shared_ptr<OutputConstraint> constraint;
    std::vector<TokenId> end_ids;
    bool allowed = false;  // compute_mask's answer: false for a dead end (or a throw)
    // compute_mask's exception text when it threw (allowed is then false); empty when it
    // returned. The engine ends the request with it: a failure is never a silent mask.
    std::string error;
  };

  MaskPrefetcher();
  ~MaskPrefetcher();  // joins the worker after its current job
  MaskPrefetcher(const MaskPrefetcher &) = delete;
  MaskPrefetcher &operator=(const MaskPrefetcher &) = delete;

  // Posts a step's jobs (replacing a batch that was abandoned); the worker starts now.
  void start(std::vector<Job> jobs);
  // Computes what is left on this thread and `pool` (optional), waits for the rest until
  // `deadline`, and returns the jobs in their posted order. Idempotent within a step.
  const std::vector<Job> &finish(ThreadPool *pool, std::chrono::steady_clock::time_point deadline);
  // Drops the step's jobs not yet started (the forward failed); one in flight ends alone.
  void abandon();

 private:
  struct Batch;
  static void run_jobs(Batch &b);  // takes jobs until none is left
  void worker_main();

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Batch> posted_;   // under mu_: the batch the worker should work on
  bool stop_ = false;               // under mu_
  std::shared_ptr<Batch> current_;  // engine thread: the step's batch
  std::thread worker_;              // last: started when everything above exists
};

}  // namespace keel
