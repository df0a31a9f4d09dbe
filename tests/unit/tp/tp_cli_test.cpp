// `keel run --tensor-parallel N`: the keel binary with its real `keel engine-tp-worker`
// ranks gives the tokens and logprobs of one rank; a model that does not split is an
// error exit naming the reason, not a hang.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support/paths.h"

namespace keel::test {
namespace {

std::string run_cmd(const std::string &cmd, int *status) {
  std::string out;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *status = pclose(p);
  return out;
}

struct Generated {
  std::vector<int> ids;
  std::vector<double> logprobs;
};

Generated run(const std::filesystem::path &model, int tp, int *status) {
  const std::string out =
      run_cmd("timeout 60 " + keel_binary().string() + " run --model " + model.string() +
                  " --prompt-ids 1,17,33,5,90,12 -n 10 --ignore-eos --json --threads " +
                  std::to_string(std::max(tp, 1)) + " --tensor-parallel " + std::to_string(tp),
              status);
  Generated g;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("id")) continue;
    g.ids.push_back(j["id"].get<int>());
    g.logprobs.push_back(j["logprob"].get<double>());
  }
  return g;
}

TEST(TpCli, KeelRunTensorParallelMatchesOneRank) {
  if (!std::filesystem::exists(keel_binary())) GTEST_SKIP() << "keel binary not built";
  const auto model = fixtures_dir() / "models" / "llama_linear_mha_f32";
  int status = 0;
  const Generated one = run(model, 1, &status);
  ASSERT_EQ(status, 0);
  ASSERT_EQ(one.ids.size(), 10u);
  for (int tp : {2, 4}) {
    const Generated g = run(model, tp, &status);
    EXPECT_EQ(status, 0) << "tp=" << tp;
    EXPECT_EQ(g.ids, one.ids) << "tp=" << tp;
    ASSERT_EQ(g.logprobs.size(), one.logprobs.size());
    for (std::size_t i = 0; i < g.logprobs.size(); ++i)
      EXPECT_NEAR(g.logprobs[i], one.logprobs[i], 1e-4) << "tp=" << tp << " token " << i;
  }
}

TEST(TpCli, ModelThatDoesNotSplitIsAnErrorExit) {
  if (!std::filesystem::exists(keel_binary())) GTEST_SKIP() << "keel binary not built";
  int status = 0;
  const std::string out = run_cmd("timeout 60 " + keel_binary().string() + " run --model " +
                                      (fixtures_dir() / "models" / "qwen2_f32").string() +
                                      " --prompt-ids 1,2,3 -n 2 --tensor-parallel 4 2>&1",
                                  &status);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(WEXITSTATUS(status), 124) << "timed out";
  EXPECT_NE(out.find("num_key_value_heads"), std::string::npos) << out;
}

}  // namespace
}  // namespace keel::test
