// Diagnosis of CudaEngineSpeculative.DISABLED_DraftModelOnTheDeviceKeepsTheGreedyOutput
// (session 17): the default model drafting for itself on the CUDA runner changes the
// greedy output. Each variant (the draft on the target's context or a context of its own,
// graphs, programmatic launch or the fused decode kernels off, n-gram drafts, no drafts
// without graphs) must keep all 8 requests' output without drafts; it prints how many do
// (disabled with the test it diagnoses: --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/draft_model_drafter.h"
#include "engine/engine.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "support/paths.h"
#include "unit/engine/collector.h"

namespace keel::cuda {
namespace {

GenerationRequest req(std::uint64_t id, int variant) {
  GenerationRequest r;
  r.id = RequestId{id};
  std::vector<TokenId> phrase;
  for (int k = 0; k < 17 + variant; ++k) phrase.push_back(5 + (k * 53 + variant * 211) % 3000);
  for (int rep = 0; rep < 3; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
  r.sampling.max_tokens = 40;
  r.sampling.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

CudaRunnerOptions base() {
  CudaRunnerOptions o;
  o.num_kv_blocks = 256;
  o.max_batch_tokens = 256;
  o.max_seqs = 8;
  o.max_logits_rows = 24;
  o.max_model_len = 512;
  o.gpu_sampling = true;
  return o;
}

// mode: 0 off, 1 sibling, 2 separate context, 3 ngram
std::vector<std::vector<TokenId>> run(int mode, CudaRunnerOptions o, CudaRunnerOptions od,
                                      long long *acc) {
  const auto dir = keel::test::source_dir() / "models" / "default";
  EngineConfig cfg;
  cfg.device_sampling = true;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = 256;
  if (mode != 0) {
    cfg.speculative.num_speculative_tokens = 4;
    cfg.speculative.max_running = 0;
    cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
    cfg.speculative.method = mode == 3 ? "ngram" : "draft:" + dir.string();
    if (mode == 2)
      cfg.speculative.make_drafter = [dir, od]() -> std::unique_ptr<Drafter> {
        return std::make_unique<DraftModelDrafter>(OwningCudaRunner::open(dir, 0, od), 0);
      };
  }
  Engine e(
      [&] {
        EngineBackend b;
        b.runner = OwningCudaRunner::open(dir, 0, o);
        return b;
      },
      cfg);
  keel::test::Collector c;
  for (int j = 0; j < 8; ++j) {
    e.submit(req(j + 1, j), c.sink());
    EXPECT_TRUE(c.wait_finished(j + 1));
  }
  std::vector<std::vector<TokenId>> out;
  for (int i = 0; i < 8; ++i) out.push_back(c.get(i + 1).tokens);
  *acc = e.status().spec_accepted;
  return out;
}

TEST(CudaDraftOnCudaDiag, DISABLED_Variants) {
  KEEL_REQUIRE_CUDA_DEVICE();
  struct V {
    const char *name;
    int mode;
    bool graphs, pdl, fused;
  };
  const V vs[] = {{"sibling", 1, true, true, true},
                  {"separate ctx", 2, true, true, true},
                  {"sibling no graphs", 1, false, true, true},
                  {"sibling no pdl", 1, true, false, true},
                  {"sibling no fused", 1, true, true, false},
                  {"ngram", 3, true, true, true},
                  {"off, no graphs", 0, false, true, true}};
  long long a = 0;
  const auto ref = run(0, base(), base(), &a);
  for (const V &v : vs) {
    CudaRunnerOptions o = base();
    o.cuda_graphs = v.graphs;
    o.programmatic_launch = v.pdl;
    if (!v.fused) o.fused_decode_max_m = 0;
    const auto got = run(v.mode, o, o, &a);
    int same = 0;
    for (int i = 0; i < 8; ++i) same += got[i] == ref[i];
    std::printf("[ diag ] %-18s same %d/8, accepted %lld\n", v.name, same, a);
    EXPECT_EQ(same, 8) << v.name;
  }
}

}  // namespace
}  // namespace keel::cuda
