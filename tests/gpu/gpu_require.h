// The gpu label's guard: a test that needs a CUDA device skips, with the reason, without one.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "trainer/cuda/gpu_step.h"

namespace tj::gpu_test {

// "needs <n> CUDA device(s), <v> visible[: why none is]".
inline std::string SkipReason(int needed) {
  const int visible = cuda::VisibleDevices();
  std::string why = "needs " + std::to_string(needed) + " CUDA device(s), " +
                    std::to_string(visible) + " visible";
  if (visible == 0) why += ": " + cuda::NoDeviceReason();
  return why;
}

}  // namespace tj::gpu_test

#define TJ_REQUIRE_GPUS(n) \
  if (::tj::cuda::VisibleDevices() < (n)) GTEST_SKIP() << ::tj::gpu_test::SkipReason(n)

#define TJ_REQUIRE_GPU() TJ_REQUIRE_GPUS(1)
