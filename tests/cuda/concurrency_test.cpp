// Stream ownership and bounded waits: a wedged stream in one engine must not stall
// another engine in the same process, and host waits on it must time out with an error.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/gemm.h"
#include "stream_blocker.h"
#include "tiny_llama.h"

namespace keel::cuda {
namespace {

using namespace std::chrono_literals;

using test::StreamBlocker;

TEST(CudaConcurrency, HostWaitOnWedgedStreamTimesOut) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  StreamBlocker blocker(ctx);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    blocker.after().wait(200ms, "wedged stream");
    FAIL() << "wait returned while the stream was blocked";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("wedged stream"), std::string::npos);
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 5s);
  EXPECT_FALSE(blocker.after().done());
  blocker.release();
  blocker.after().wait(10s, "released stream");
  EXPECT_EQ(test::download<std::int32_t>(ctx, blocker.status(), 1)[0],
            1);  // released, not timed out
}

TEST(CudaConcurrency, OtherEngineFinishesWhileOneIsWedged) {
  KEEL_REQUIRE_CUDA_DEVICE();
  // Engine B (a whole runner) and engine A (its own context) in one process.
  CudaContext ctx_a, ctx_b;
  test::TinyLlama m(46);
  CudaRunnerOptions opts;
  opts.block_size = 4;
  opts.num_kv_blocks = 16;
  opts.max_batch_tokens = 32;
  opts.max_seqs = 4;
  opts.max_logits_rows = 4;
  opts.max_model_len = 64;
  CudaModelRunner runner_b(
      ctx_b, m.cfg, [&](const std::string &n) { return m.view(n); }, opts);
  ForwardBatch batch;
  for (int i = 0; i < 10; ++i) batch.tokens.push_back(3 * i + 1);
  batch.seqs.push_back({0, 10, 0, 0, 3, SequenceSlice::Logits::kLast});
  batch.block_table = {2, 0, 1};
  ForwardOutput before, during;
  runner_b.forward(batch, before);

  {
    StreamBlocker blocker(ctx_a);  // engine A wedged from here on
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) runner_b.forward(batch, during);
    std::vector<std::byte> snap(runner_b.kv().block_bytes());
    runner_b.kv().save_block(2, snap);  // copy streams of B are unaffected too
    runner_b.kv().load_block(3, snap);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
    EXPECT_FALSE(blocker.after().done()) << "engine A should still be wedged";
    EXPECT_EQ(before.logits, during.logits);
    blocker.release();
    blocker.after().wait(10s, "engine A after release");
  }
}

// In every build: a forward from a thread other than the one that made the context is
// fatal (naming the entry point), and the owner keeps working.
TEST(CudaConcurrencyDeathTest, AForwardFromAForeignThreadIsFatal) {
  KEEL_REQUIRE_CUDA_DEVICE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CudaContext ctx;
  test::TinyLlama m(47);
  CudaRunnerOptions opts;
  opts.block_size = 4;
  opts.num_kv_blocks = 8;
  opts.max_batch_tokens = 16;
  opts.max_seqs = 2;
  opts.max_logits_rows = 2;
  opts.max_model_len = 32;
  CudaModelRunner runner(ctx, m.cfg, std::uint64_t{5}, opts);
  ForwardBatch batch;
  batch.tokens = {1, 2};
  batch.seqs.push_back({0, 2, 0, 0, 1, SequenceSlice::Logits::kLast});
  batch.block_table = {0};
  EXPECT_DEATH(std::thread([&] {
                 ForwardOutput o;
                 runner.forward(batch, o);
               }).join(),
               "CudaModelRunner::forward called from thread");
  ForwardOutput o;
  runner.forward(batch, o);  // the owner still can
  EXPECT_EQ(o.row_seq.size(), 1u);
}

}  // namespace
}  // namespace keel::cuda
