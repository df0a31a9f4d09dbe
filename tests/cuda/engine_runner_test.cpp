// --device parsing (no GPU needed) and the context-owning runner an engine holds.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "support/paths.h"

namespace keel::cuda {
namespace {

TEST(CudaEngineRunner, ParsesDeviceSpecs) {
  EXPECT_EQ(parse_cuda_device("cuda"), 0);
  EXPECT_EQ(parse_cuda_device("cuda:0"), 0);
  EXPECT_EQ(parse_cuda_device("cuda:3"), 3);
  for (const char *bad :
       {"cpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda:99999", "gpu:0", "CUDA", ""})
    EXPECT_THROW(parse_cuda_device(bad), Error) << bad;
}

TEST(CudaEngineRunner, OwnsItsContextAndMatchesThePlainRunner) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  CudaRunnerOptions o;
  o.num_kv_blocks = 8;
  o.max_batch_tokens = 64;
  o.max_seqs = 2;
  o.max_logits_rows = 2;
  o.max_model_len = 128;
  auto owning = OwningCudaRunner::open(dir, 0, o);
  CudaContext ctx;
  auto plain = CudaModelRunner::open(dir, ctx, o);
  ForwardBatch b;
  for (int i = 0; i < 20; ++i) b.tokens.push_back(5 + 17 * i);
  b.seqs.push_back({0, 20, 0, 0, 2, SequenceSlice::Logits::kLast});
  b.block_table = {3, 1};
  ForwardOutput a, p;
  owning->forward(b, a);
  plain->forward(b, p);
  EXPECT_EQ(a.logits, p.logits);
  EXPECT_EQ(owning->config().vocab_size, plain->config().vocab_size);
  EXPECT_THROW(OwningCudaRunner::open(dir, device_count(), o), Error);  // no such device
}

}  // namespace
}  // namespace keel::cuda
