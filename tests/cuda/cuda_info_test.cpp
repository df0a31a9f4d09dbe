// The backend description works with and without a device (CI has no GPU).
#include "exec/cuda/cuda_info.h"

#include <gtest/gtest.h>

#include "exec/cuda/cuda_resources.h"

namespace keel::cuda {
namespace {

TEST(CudaInfo, DescribesToolkitAndDevices) {
  const std::string d = describe_backend();
  EXPECT_EQ(d.rfind("cuda " + std::to_string(KEEL_CUDA_VERSION_MAJOR) + ".", 0), 0u) << d;
  if (device_count() == 0)
    EXPECT_NE(d.find("no device"), std::string::npos) << d;
  else
    EXPECT_NE(d.find("sm_"), std::string::npos) << d;
}

}  // namespace
}  // namespace keel::cuda
