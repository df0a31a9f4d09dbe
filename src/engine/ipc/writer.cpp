#include "engine/ipc/writer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace keel::ipc {

namespace {

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms.count() / 1000.0);
  return buf;
}

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

IpcWriter::IpcWriter(int fd, WriterLimits limits, Callbacks callbacks)
    : fd_(fd), limits_(limits), callbacks_(std::move(callbacks)) {
  const int flags = ::fcntl(fd_, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  thread_ = std::thread([this] { run(); });
}

IpcWriter::~IpcWriter() { close(); }

void IpcWriter::close() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  drained_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

PostResult IpcWriter::post(FrameType type, const std::string &payload, std::uint64_t tag,
                           FramePriority priority) {
  if (payload.size() > kMaxFrameBytes) {
    std::lock_guard lock(mu_);
    refused_++;
    return PostResult::kFull;
  }
  Item item;
  item.bytes = encode_frame(type, payload);  // outside the lock: may be megabytes
  item.type = type;
  item.tag = tag;
  item.priority = priority;
  const auto now = Clock::now();
  item.deadline = now + limits_.frame_deadline;
  {
    std::lock_guard lock(mu_);
    if (closed_ || stop_) return PostResult::kClosed;
    const std::size_t scale = priority == FramePriority::kControl ? 2 : 1;
    const bool over = queue_.size() + 1 > limits_.max_frames * scale ||
                      bytes_ + item.bytes.size() > limits_.max_bytes * scale;
    if (over && !queue_.empty()) {
      refused_++;
      last_refused_ = now;
      return PostResult::kFull;
    }
    if (queue_.empty()) last_progress_ = now;  // an idle peer owed nothing until now
    bytes_ += item.bytes.size();
    queue_.push_back(std::move(item));
  }
  work_cv_.notify_one();
  return PostResult::kQueued;
}

bool IpcWriter::flush(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  drained_cv_.wait_until(lock, deadline, [&] { return queue_.empty() || closed_ || stop_; });
  return queue_.empty() && !closed_;
}

IpcWriter::Stats IpcWriter::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  s.frames = queue_.size();
  s.bytes = bytes_;
  if (blocked_since_)
    s.blocked_seconds = std::chrono::duration<double>(Clock::now() - *blocked_since_).count();
  s.sent = sent_;
  s.refused = refused_;
  s.expired = expired_;
  s.closed = closed_;
  return s;
}

std::string IpcWriter::stall() const {
  std::lock_guard lock(mu_);
  return stall_locked(Clock::now());
}

std::string IpcWriter::stall_locked(Clock::time_point now) const {
  const std::string queued =
      std::to_string(queue_.size()) + " frames, " + mib(bytes_) + " waiting to be written";
  if (expired_ > 0)
    return "it did not read its socket for " + seconds(worst_wait_) + " (" + queued + ")";
  const auto grace =
      std::min<std::chrono::milliseconds>(std::chrono::seconds(1), limits_.frame_deadline);
  // Refused since the peer last took a byte (perhaps before the writer first found the
  // socket full), and nothing taken for the grace since.
  if (blocked_since_ && last_refused_ && *last_refused_ >= last_progress_ &&
      now - last_progress_ >= grace)
    return "its IPC queue is full and it has read nothing for " +
           seconds(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_)) +
           " (" + queued + ")";
  return "";
}

void IpcWriter::expire(std::unique_lock<std::mutex> &lock) {
  const auto now = Clock::now();
  struct Late {
    FrameType type;
    std::uint64_t tag;
    bool partly;
  };
  std::vector<Late> late;
  // Deadlines grow along the queue (one deadline per writer, posts in order), so the
  // late frames are a prefix of it.
  for (auto it = queue_.begin(); it != queue_.end() && it->deadline <= now;) {
    if (!it->expired) {
      it->expired = true;
      expired_++;
      worst_wait_ = std::max(worst_wait_, std::chrono::duration_cast<std::chrono::milliseconds>(
                                              now - it->deadline + limits_.frame_deadline));
      late.push_back({it->type, it->tag, it->sent > 0});
    }
    if (it->sent == 0 && it->priority == FramePriority::kBulk) {
      bytes_ -= it->bytes.size();
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  if (queue_.empty()) drained_cv_.notify_all();
  if (late.empty() || !callbacks_.on_expired) return;
  lock.unlock();
  for (const auto &l : late) callbacks_.on_expired(l.type, l.tag, l.partly);
  lock.lock();
}

void IpcWriter::fail(std::unique_lock<std::mutex> &lock, const std::string &why) {
  closed_ = true;
  queue_.clear();
  bytes_ = 0;
  blocked_since_.reset();
  drained_cv_.notify_all();
  if (!callbacks_.on_closed) return;
  lock.unlock();
  callbacks_.on_closed(why);
  lock.lock();
}

void IpcWriter::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      blocked_since_.reset();
      work_cv_.wait_for(lock, kPollSlice, [&] { return stop_ || !queue_.empty(); });
      continue;
    }
    expire(lock);
    if (stop_ || queue_.empty()) continue;
    // Only this thread removes frames; a deque keeps references to its elements valid
    // while other threads append.
    Item &head = queue_.front();
    const char *p = head.bytes.data() + head.sent;
    const std::size_t n = head.bytes.size() - head.sent;
    lock.unlock();
    const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    const int err = errno;
    lock.lock();
    if (w > 0) {
      blocked_since_.reset();
      last_progress_ = Clock::now();
      head.sent += static_cast<std::size_t>(w);
      if (head.sent == head.bytes.size()) {
        bytes_ -= head.bytes.size();
        queue_.pop_front();
        sent_++;
        if (queue_.empty()) drained_cv_.notify_all();
      }
      continue;
    }
    if (w < 0 && err == EINTR) continue;
    if (w < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      const auto now = Clock::now();
      if (!blocked_since_) blocked_since_ = now;
      // Wake by the next deadline to report it on time, and at least every slice.
      auto wait = kPollSlice;
      for (const auto &item : queue_)
        if (!item.expired) {
          wait =
              std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(item.deadline - now),
                         std::chrono::milliseconds(1), kPollSlice);
          break;
        }
      lock.unlock();
      pollfd pf{fd_, POLLOUT, 0};
      ::poll(&pf, 1, static_cast<int>(wait.count()));
      lock.lock();
      continue;
    }
    fail(lock, w == 0 ? std::string("send wrote nothing") : std::string(std::strerror(err)));
    return;
  }
}

}  // namespace keel::ipc
