#include "engine/mask_prefetcher.h"

#include <atomic>
#include <exception>

#include "core/error.h"
#include "core/thread_pool.h"

namespace keel {

struct MaskPrefetcher::Batch {
  std::vector<Job> jobs;
  std::atomic<std::size_t> next{0};  // the next job to take
  std::mutex mu;
  std::condition_variable cv;
  std::size_t done = 0;  // under mu
  bool finished = false;
};

void MaskPrefetcher::run_jobs(Batch &b) {
  for (;;) {
    const std::size_t i = b.next.fetch_add(1);
    if (i >= b.jobs.size()) return;
    Job &job = b.jobs[i];
    job.allowed = false;
    job.error.clear();
    try {
      job.allowed = job.constraint->compute_mask(job.end_ids);
    } catch (const std::exception &e) {
      // Not a dead end: the engine ends the request with this text (never hidden).
      job.error = e.what();
      if (job.error.empty()) job.error = "an exception without a message";
    } catch (...) {
      job.error = "an exception that is not a std::exception";
    }
    std::lock_guard lk(b.mu);
    if (++b.done == b.jobs.size()) b.cv.notify_all();
  }
}

MaskPrefetcher::MaskPrefetcher() : worker_([this] { worker_main(); }) {}

MaskPrefetcher::~MaskPrefetcher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void MaskPrefetcher::worker_main() {
  for (;;) {
    std::shared_ptr<Batch> b;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || posted_ != nullptr; });
      if (stop_) return;
      b = std::move(posted_);
    }
    run_jobs(*b);
  }
}

void MaskPrefetcher::start(std::vector<Job> jobs) {
  current_ = std::make_shared<Batch>();
  current_->jobs = std::move(jobs);
  if (current_->jobs.empty()) return;
  {
    std::lock_guard lk(mu_);
    posted_ = current_;
  }
  cv_.notify_one();
}

const std::vector<MaskPrefetcher::Job> &MaskPrefetcher::finish(
    ThreadPool *pool, std::chrono::steady_clock::time_point deadline) {
  KEEL_CHECK(current_ != nullptr);
  Batch &b = *current_;
  if (b.finished) return b.jobs;
  // Rows the worker has not reached: spread over the pool when more than one is left.
  const std::size_t left = b.jobs.size() - std::min(b.jobs.size(), b.next.load());
  if (pool && left > 1)
    pool->run([&](int, int) { run_jobs(b); });
  else
    run_jobs(b);
  {
    std::unique_lock lk(b.mu);
    if (!b.cv.wait_until(lk, deadline, [&] { return b.done == b.jobs.size(); }))
      throw Error(ErrorCode::kTimeout,
                  "engine: structured-output masks not computed by the step's deadline");
  }
  {
    std::lock_guard lk(mu_);
    if (posted_ == current_) posted_.reset();  // the worker never took it: nothing to do
  }
  b.finished = true;
  return b.jobs;
}

void MaskPrefetcher::abandon() {
  if (!current_) return;
  current_->next.store(current_->jobs.size());
  std::lock_guard lk(mu_);
  if (posted_ == current_) posted_.reset();
  current_.reset();
}

}  // namespace keel
