// Run-time feature choice of the fat binary (cuda_features.h): host logic, checked
// without a GPU; with one, that the context applies it and that the runtime found
// machine code for the device among the architectures the build says it carries.
#include "exec/cuda/cuda_features.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "cuda_test_util.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/k_debug.h"

namespace keel::cuda {
namespace {

TEST(CudaFeatures, FollowComputeCapability) {
  const CudaFeatures a100 = cuda_features(8, 0, 163 * 1024, "auto");
  EXPECT_FALSE(a100.programmatic_launch);
  EXPECT_EQ(a100.smem_per_block, 163u * 1024);
  const CudaFeatures l40s = cuda_features(8, 9, 99 * 1024, "");
  EXPECT_FALSE(l40s.programmatic_launch);
  const CudaFeatures h200 = cuda_features(9, 0, 227 * 1024, "auto");
  EXPECT_TRUE(h200.programmatic_launch);
  EXPECT_EQ(h200.smem_per_block, 227u * 1024);
  EXPECT_FALSE(h200.baseline);
  EXPECT_TRUE(cuda_features(10, 0, 227 * 1024, "auto").programmatic_launch);
  EXPECT_TRUE(cuda_features(12, 0, 99 * 1024, "auto").programmatic_launch);
  EXPECT_NE(h200.describe().find("sm_90"), std::string::npos) << h200.describe();
}

TEST(CudaFeatures, BaselineIsTheSmallestSet) {
  const CudaFeatures f = cuda_features(9, 0, 227 * 1024, "baseline");
  EXPECT_TRUE(f.baseline);
  EXPECT_FALSE(f.programmatic_launch);
  EXPECT_EQ(f.smem_per_block, kBaselineSmemPerBlock);
  EXPECT_EQ(f.major, 9);
  EXPECT_NE(f.describe().find("baseline"), std::string::npos) << f.describe();
  // Never more than the device has.
  EXPECT_EQ(cuda_features(8, 6, 64 * 1024, "baseline").smem_per_block, 64u * 1024);
}

TEST(CudaFeatures, UnknownModeNamesTheVariable) {
  try {
    cuda_features(9, 0, 227 * 1024, "hopper");
    FAIL() << "accepted an unknown mode";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("KEEL_CUDA_FEATURES"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hopper"), std::string::npos) << e.what();
  }
}

TEST(CudaFeatures, CompiledArchitecturesListSassAndPtx) {
  const std::string a = compiled_architectures();
  EXPECT_EQ(a.rfind("sm_", 0), 0u) << a;
  EXPECT_NE(a.find(", PTX compute_"), std::string::npos) << a;
}

TEST(CudaFeatures, ContextAppliesTheMode) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContextOptions o;
  o.features = "baseline";
  CudaContext base(o);
  EXPECT_TRUE(base.features().baseline);
  EXPECT_FALSE(base.features().programmatic_launch);
  EXPECT_LE(base.features().smem_per_block, kBaselineSmemPerBlock);
  o.features = "auto";
  CudaContext own(o);
  EXPECT_EQ(own.features().programmatic_launch, own.props().major >= 9);
  EXPECT_EQ(own.features().smem_per_block, own.props().sharedMemPerBlockOptin);
}

// The runtime picked machine code built for this device (or JIT-compiled the PTX of the
// newest architecture), and the build's list names it.
TEST(CudaFeatures, DeviceRunsCodeTheBuildCarries) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  int ptx = 0;
  const int bin = loaded_binary_version(&ptx);
  ASSERT_GT(bin, 0) << "no machine code for " << ctx.device_name();
  const std::string list = compiled_architectures();
  const int cc = ctx.props().major * 10 + ctx.props().minor;
  std::printf("device sm_%d runs sm_%d code (PTX %d); build carries %s\n", cc, bin, ptx,
              list.c_str());
  EXPECT_LE(bin, cc);
  // SASS of the device's own architecture when the build has it; else the PTX's JIT.
  if (list.find("sm_" + std::to_string(cc)) != std::string::npos)
    EXPECT_EQ(bin, cc) << list;
  else
    EXPECT_NE(list.find("compute_" + std::to_string(ptx)), std::string::npos) << list;
}

}  // namespace
}  // namespace keel::cuda
