// How the tensor-parallel tests start worker ranks: this test binary again, running
// TpWorkerEntry.DISABLED_Run (tp_worker_entry.cpp).
#pragma once

#include <filesystem>

#include "engine/tp/group.h"

namespace keel::test {

inline constexpr const char *kTpWorkerEnv = "KEEL_TP_TEST_WORKER";

inline tp::TpLaunch tp_test_launch() {
  tp::TpLaunch l;
  l.executable = std::filesystem::read_symlink("/proc/self/exe");
  l.args = {"--gtest_filter=TpWorkerEntry.DISABLED_Run", "--gtest_also_run_disabled_tests",
            "--gtest_brief=1"};
  l.env = {std::string(kTpWorkerEnv) + "=1"};
  return l;
}

}  // namespace keel::test
