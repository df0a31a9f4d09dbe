// keel run and keel perplexity end to end: --json/--echo output against the
// transformers reference of a fixture, and perplexity consistent with those logprobs.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/paths.h"

namespace keel::test {
namespace {

std::string run_cmd(const std::string &cmd, int *status) {
  std::string out;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *status = pclose(p);
  return out;
}

TEST(KeelRun, JsonEchoMatchesTransformers) {
  const auto dir = fixtures_dir() / "models" / "qwen3_f32";
  if (!std::filesystem::exists(keel_binary())) GTEST_SKIP() << "keel binary not built";
  nlohmann::json ref;
  std::ifstream(dir / "reference.json") >> ref;
  const auto &p = ref["prompts"][1];
  std::string ids;
  for (auto &i : p["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(i.get<int>());
  const int n = static_cast<int>(p["greedy"].size());
  int status = 0;
  const std::string out = run_cmd(keel_binary().string() + " run --model " + dir.string() +
                                      " --prompt-ids " + ids + " -n " + std::to_string(n) +
                                      " --json --echo --logprobs 5 --ignore-eos --threads 2",
                                  &status);
  ASSERT_EQ(status, 0) << out;
  std::istringstream lines(out);
  std::string line;
  std::vector<nlohmann::json> objs;
  while (std::getline(lines, line))
    if (!line.empty()) objs.push_back(nlohmann::json::parse(line));
  const std::size_t np = p["ids"].size();
  ASSERT_EQ(objs.size(), np + n);
  EXPECT_TRUE(objs[0]["logprob"].is_null());
  for (std::size_t i = 1; i < np; ++i) {
    EXPECT_EQ(objs[i]["id"], p["ids"][i]);
    EXPECT_NEAR(objs[i]["logprob"].get<double>(), p["prompt_logprobs"][i].get<double>(), 1e-3);
  }
  for (int k = 0; k < n; ++k) {
    const auto &o = objs[np + k];
    const auto &g = p["greedy"][k];
    if (g["margin"].get<double>() > 1e-3) EXPECT_EQ(o["id"], g["id"]) << "step " << k;
    if (o["id"] != g["id"]) break;  // the reference continues along its own tokens
    EXPECT_NEAR(o["logprob"].get<double>(), g["logprob"].get<double>(), 1e-3);
    ASSERT_EQ(o["top"].size(), 5u);
    EXPECT_EQ(o["top"][0][0], g["top"][0][0]);
  }
}

TEST(KeelRun, BadInputIsAnErrorNotACrash) {
  if (!std::filesystem::exists(keel_binary())) GTEST_SKIP() << "keel binary not built";
  const auto dir = fixtures_dir() / "models" / "qwen3_f32";
  int status = 0;
  run_cmd(keel_binary().string() + " run --model " + dir.string() + " --prompt-ids 1,99999 2>&1",
          &status);
  EXPECT_NE(status, 0);
  run_cmd(keel_binary().string() + " run --model " + dir.string() + " --prompt-ids 1,x 2>&1",
          &status);
  EXPECT_NE(status, 0);
  run_cmd(keel_binary().string() + " run --model /nonexistent --prompt-ids 1 2>&1", &status);
  EXPECT_NE(status, 0);
}

}  // namespace
}  // namespace keel::test
