// Liveness of a CPU tensor-parallel group, with real processes: a worker killed or
// stalled mid-generation fails the request with an error (never a hang) and loses the
// group, whose later requests fail at once; workers die with their rank 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "engine/engine.h"
#include "engine/tp/runner.h"
#include "support/paths.h"
#include "unit/engine/collector.h"
#include "unit/engine/engine_test_util.h"
#include "unit/tp/tp_test_launch.h"

namespace keel::test {
namespace {

using namespace std::chrono_literals;

std::filesystem::path model() { return fixtures_dir() / "models" / "llama_linear_mha_f32"; }

struct Lost {
  std::mutex mu;
  std::string why;
  std::atomic<int> calls{0};
};

struct Group {
  std::unique_ptr<Engine> engine;
  tp::TpCpuRunner *runner = nullptr;  // owned by the engine
  std::shared_ptr<Lost> lost = std::make_shared<Lost>();
};

Group start(int size, std::chrono::milliseconds op_timeout) {
  Group g;
  auto lost = g.lost;
  tp::TpCpuRunner **slot = &g.runner;
  g.engine = std::make_unique<Engine>(
      [=] {
        EngineBackend b;
        b.context = std::make_unique<ExecContext>(1);
        tp::TpRunnerOptions o;
        o.model = model();
        o.size = size;
        o.threads_per_rank = 1;
        o.kv = {64, 16};
        o.launch = tp_test_launch();
        o.op_timeout = op_timeout;
        o.on_lost = [lost](const std::string &why) {
          std::lock_guard lk(lost->mu);
          lost->why = why;
          ++lost->calls;
        };
        auto r = std::make_unique<tp::TpCpuRunner>(o, *b.context);
        *slot = r.get();
        b.runner = std::move(r);
        return b;
      },
      small_config(64, 8, 16));
  return g;
}

GenerationRequest long_request(std::uint64_t id) {
  auto r = greedy_request(id, random_prompt(id, 12), 200);
  r.sampling.ignore_eos = true;
  return r;
}

bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  const auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
}

// Kill -9 a worker while a request is generating: the step it is in fails, the
// request ends with an error naming the rank, and the group is lost.
TEST(TpGroupLiveness, WorkerKilledMidGenerationFailsTheRequest) {
  if (!std::filesystem::exists(model())) GTEST_SKIP();
  Group g = start(4, 20000ms);
  ASSERT_NE(g.runner, nullptr);
  const pid_t victim = g.runner->group().worker_pids()[1];  // rank 2
  Collector c;
  g.engine->submit(long_request(1), c.sink());
  ASSERT_TRUE(eventually([&] { return c.get(1).tokens.size() >= 3; }, 20s));
  // Stop it first so that it is certainly mid-generation (inside a step: rank 0
  // waits on its all-reduce), then kill it.
  ::kill(victim, SIGSTOP);
  ASSERT_TRUE(eventually([&] { return g.engine->status().step_in_progress_seconds > 0.05; }, 10s));
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  ASSERT_TRUE(c.wait_finished(1, 5s)) << "the request hangs";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  const Collected r = c.get(1);
  EXPECT_EQ(r.finish, FinishReason::kError);
  EXPECT_LT(r.tokens.size(), 200u);
  EXPECT_NE(r.error.find("rank"), std::string::npos) << r.error;
  ASSERT_TRUE(eventually([&] { return g.lost->calls.load() == 1; }, 5s));
  EXPECT_TRUE(g.runner->group().lost());

  // The lost group fails new requests at once.
  const auto t1 = std::chrono::steady_clock::now();
  g.engine->submit(long_request(2), c.sink());
  ASSERT_TRUE(c.wait_finished(2, 5s));
  EXPECT_EQ(c.get(2).finish, FinishReason::kError);
  EXPECT_NE(c.get(2).error.find("group lost"), std::string::npos) << c.get(2).error;
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 2s);
  EXPECT_EQ(g.lost->calls.load(), 1);
  g.engine.reset();  // tears down: remaining workers exit, nothing hangs
}

// A stalled worker (SIGSTOP) misses the operation deadline.
TEST(TpGroupLiveness, StalledWorkerMissesTheDeadline) {
  if (!std::filesystem::exists(model())) GTEST_SKIP();
  Group g = start(2, 400ms);
  const pid_t victim = g.runner->group().worker_pids()[0];
  Collector c;
  g.engine->submit(long_request(1), c.sink());
  ASSERT_TRUE(eventually([&] { return c.get(1).tokens.size() >= 2; }, 20s));
  ::kill(victim, SIGSTOP);
  ASSERT_TRUE(c.wait_finished(1, 5s)) << "the request hangs";
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("deadline"), std::string::npos) << c.get(1).error;
  EXPECT_EQ(g.lost->calls.load(), 1);
  ::kill(victim, SIGKILL);
  g.engine.reset();
}

// A worker that dies while the engine is idle is noticed by the group's monitor.
TEST(TpGroupLiveness, IdleWorkerDeathIsNoticed) {
  if (!std::filesystem::exists(model())) GTEST_SKIP();
  Group g = start(2, 20000ms);
  ::kill(g.runner->group().worker_pids()[0], SIGKILL);
  ASSERT_TRUE(eventually([&] { return g.lost->calls.load() == 1; }, 3s));
  std::lock_guard lk(g.lost->mu);
  EXPECT_NE(g.lost->why.find("killed by signal 9"), std::string::npos) << g.lost->why;
}

// kill -9 of rank 0 (its own process here): its workers die with it.
TEST(TpGroupLiveness, WorkersDieWithRankZero) {
  if (!std::filesystem::exists(model())) GTEST_SKIP();
  const std::string pidfile = ::testing::TempDir() + "/tp_pids_" + std::to_string(::getpid());
  std::filesystem::remove(pidfile);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const pid_t rank0 = ::fork();
  ASSERT_GE(rank0, 0);
  if (rank0 == 0) {
    ::setenv("KEEL_TP_TEST_PIDFILE", pidfile.c_str(), 1);
    ::execl(self.c_str(), self.c_str(), "--gtest_filter=TpRank0Entry.DISABLED_Run",
            "--gtest_also_run_disabled_tests", "--gtest_brief=1", static_cast<char *>(nullptr));
    ::_exit(127);
  }
  std::vector<pid_t> workers;
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(pidfile); }, 20s));
  {
    std::ifstream f(pidfile);
    for (pid_t p; f >> p;) workers.push_back(p);
  }
  ASSERT_EQ(workers.size(), 3u);
  for (pid_t p : workers) EXPECT_FALSE(gone(p));
  ::kill(rank0, SIGKILL);
  ::waitpid(rank0, nullptr, 0);
  for (pid_t p : workers) EXPECT_TRUE(eventually([&] { return gone(p); }, 3s)) << p;
  std::filesystem::remove(pidfile);
}

}  // namespace
}  // namespace keel::test
