// The engine child's load progress sender: the latest report always reaches the front,
// a tight loop of reports does not become a flood of frames, phases arrive in order.
#include "engine/ipc/progress_sender.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "engine/ipc/frame.h"
#include "engine/ipc/messages.h"

namespace keel {
namespace {

using namespace std::chrono_literals;

// Both ends of a socket pair; the front's side reads every progress frame until EOF.
struct Pair {
  int fds[2] = {-1, -1};
  Pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0); }
  ~Pair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  std::vector<LoadProgress> read_all() {
    ::shutdown(fds[0], SHUT_WR);  // the child is done: EOF for the reader
    std::vector<LoadProgress> got;
    ipc::FrameReader reader(fds[1]);
    while (auto f = reader.read()) {
      EXPECT_EQ(f->type, ipc::FrameType::kProgress);
      got.push_back(ipc::decode_progress(f->payload));
    }
    return got;
  }
};

TEST(ProgressSender, ATightLoopBecomesFewFramesEndingWithTheLatest) {
  Pair pair;
  std::vector<LoadProgress> got;
  {
    ipc::ProgressSender sender(pair.fds[0], 200ms);
    constexpr std::int64_t kTotal = 200000;
    for (std::int64_t done = 0; done <= kTotal; done += 1)
      sender.report({"reading weights", done, kTotal, "bytes"});
    sender.report({"preparing weights", 0, 0, ""});
    sender.finish();
    sender.report({"too late", 1, 1, ""});  // after finish: dropped, never written
    got = pair.read_all();
    EXPECT_EQ(sender.frames_sent(), got.size());
  }
  ASSERT_GE(got.size(), 2u);
  // 200,001 reports in well under a second: a handful of frames, not thousands.
  EXPECT_LE(got.size(), 12u);
  EXPECT_EQ(got.back(), (LoadProgress{"preparing weights", 0, 0, ""}));
  // The ended phase's last figure was sent before the next phase, though it came within
  // the interval.
  EXPECT_EQ(got[got.size() - 2], (LoadProgress{"reading weights", 200000, 200000, "bytes"}));
  std::int64_t last = -1;
  for (std::size_t i = 0; i + 1 < got.size(); ++i) {
    EXPECT_EQ(got[i].phase, "reading weights");
    EXPECT_GE(got[i].done, last);  // within a phase, never backwards
    last = got[i].done;
  }
}

TEST(ProgressSender, ANewPhaseGoesOutWithoutWaitingForTheInterval) {
  Pair pair;
  ipc::ProgressSender sender(pair.fds[0], std::chrono::milliseconds(60'000));
  auto sent = [&](std::uint64_t n) {  // waits up to 5 s for n frames
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (sender.frames_sent() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    return sender.frames_sent();
  };
  sender.report({"reading weights", 1, 2, "bytes"});
  ASSERT_EQ(sent(1), 1u);
  sender.report({"reading weights", 2, 2, "bytes"});  // same phase: waits for the interval
  sender.report({"uploading to device", 0, 0, ""});   // a new one: goes now
  // With a minute's interval only the phase change can have sent more frames: the ended
  // phase's last figure first (so its 100% is seen), then the new phase.
  ASSERT_EQ(sent(3), 3u);
  ipc::FrameReader reader(pair.fds[1]);
  std::vector<LoadProgress> got;
  for (int i = 0; i < 3; ++i) {
    auto f = reader.read();
    ASSERT_TRUE(f);
    got.push_back(ipc::decode_progress(f->payload));
  }
  EXPECT_EQ(got[0], (LoadProgress{"reading weights", 1, 2, "bytes"}));
  EXPECT_EQ(got[1], (LoadProgress{"reading weights", 2, 2, "bytes"}));
  EXPECT_EQ(got[2].phase, "uploading to device");
  sender.finish();
}

TEST(ProgressSender, PhasesEndingFasterThanTheSenderAllKeepTheirLastFigure) {
  // Each phase's one report is its end; the loop outruns the sending thread, so several
  // phases end between two sends (a fast load: "preparing weights" then "rebuilding cache
  // index" right after "reading weights" 100%). None may be lost.
  Pair pair;
  constexpr int kPhases = 300;
  std::vector<LoadProgress> got;
  // The front reads as frames come (300 frames would fill the socket's buffer).
  std::thread front([&] {
    ipc::FrameReader reader(pair.fds[1]);
    while (auto f = reader.read()) got.push_back(ipc::decode_progress(f->payload));
  });
  {
    ipc::ProgressSender sender(pair.fds[0], std::chrono::milliseconds(60'000));
    for (int i = 0; i < kPhases; ++i) sender.report({"phase " + std::to_string(i), 1, 1, "x"});
    sender.finish();
  }
  ::shutdown(pair.fds[0], SHUT_WR);  // EOF for the front
  front.join();
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kPhases));
  for (int i = 0; i < kPhases; ++i)
    EXPECT_EQ(got[static_cast<std::size_t>(i)],
              (LoadProgress{"phase " + std::to_string(i), 1, 1, "x"}));
}

TEST(ProgressSender, APeerThatLeftDoesNotBlockTheLoader) {
  Pair pair;
  ::close(pair.fds[1]);
  pair.fds[1] = -1;
  ipc::ProgressSender sender(pair.fds[0], 1ms);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) sender.report({"phase " + std::to_string(i % 3), i, 1000, ""});
  sender.finish();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(sender.frames_sent(), 0u);
}

}  // namespace
}  // namespace keel
