// keel run and keel perplexity end to end: --json/--echo output against the
// transformers reference of a fixture, and perplexity consistent with those logprobs;
// keel run --speculative eagle3:PATH prints what it prints without drafts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/make_eagle3_head.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "support/copying_eagle3_head.h"
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

// keel run --speculative eagle3:PATH over a tiny random llama: a random head and one wired
// to copy the target's prediction (support/copying_eagle3_head.h: fc passes the last aux
// layer, the target's final hidden state, through, the block adds nothing, lm_head is the
// target's) print the same text as no drafts, greedy and seeded; the copying head's
// drafts are accepted where the target repeats itself (as it does after this prompt).
TEST(KeelRun, Eagle3HeadKeepsTheOutput) {
  if (!std::filesystem::exists(keel_binary())) GTEST_SKIP() << "keel binary not built";
  const auto work =
      std::filesystem::temp_directory_path() / ("keel-run-eagle3-" + std::to_string(::getpid()));
  std::filesystem::remove_all(work);
  MakeModelOptions m;
  m.arch = "llama";
  m.shape = "tiny";
  m.dtype = DType::kF32;
  m.seed = 11;
  m.out = work / "target";
  m.threads = 2;
  make_model(m);
  auto weights = ModelWeights::open(m.out);
  const TensorView &lm = weights->get("lm_head.weight");
  std::vector<float> lm_head(static_cast<std::size_t>(lm.numel()));
  std::memcpy(lm_head.data(), lm.data, lm_head.size() * sizeof(float));
  MakeEagle3Options e;
  e.target = weights->config();
  e.seed = 5;
  e.out = work / "random";
  make_eagle3_head(e);
  e.out = work / "copying";
  make_copying(e, lm_head);
  make_eagle3_head(e);
  const std::string err = (work / "stderr.txt").string();
  auto run = [&](const std::string &extra, std::string *log) {
    int status = 0;
    const std::string out =
        run_cmd(keel_binary().string() + " run --model " + m.out.string() +
                    " --prompt-ids 7,7,7,7 -n 40 --ignore-eos --threads 1 " + extra + " 2>" + err,
                &status);
    std::ifstream f(err);
    std::stringstream ss;
    ss << f.rdbuf();
    if (log) *log = ss.str();
    EXPECT_EQ(status, 0) << ss.str();
    return out;
  };
  std::int64_t accepted = 0;
  for (const std::string sampling : {"", "--temperature 0.8 --seed 3"}) {
    const std::string ref = run(sampling, nullptr);
    ASSERT_FALSE(ref.empty());
    for (const char *h : {"random", "copying"}) {
      std::string log;
      EXPECT_EQ(run(sampling + " --speculative eagle3:" + (work / h).string(), &log), ref)
          << h << " " << sampling;
      const auto at = log.find("speculative eagle3: ");
      ASSERT_NE(at, std::string::npos) << log;
      long long kept = 0, drafted = 0;
      ASSERT_EQ(std::sscanf(log.c_str() + at, "speculative eagle3: %lld of %lld", &kept, &drafted),
                2)
          << log;
      EXPECT_GT(drafted, 0) << log;
      if (std::string(h) == "copying") accepted += kept;
    }
  }
  EXPECT_GT(accepted, 0);
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace keel::test
