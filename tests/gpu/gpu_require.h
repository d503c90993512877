// The gpu label's guard: a test that needs a CUDA device skips, with the reason, without one.
#pragma once

#include <gtest/gtest.h>

#include "trainer/cuda/gpu_step.h"

#define TJ_REQUIRE_GPUS(n)                                                               \
  if (::tj::cuda::VisibleDevices() < (n))                                                \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << ::tj::cuda::VisibleDevices() \
               << " visible"

#define TJ_REQUIRE_GPU() TJ_REQUIRE_GPUS(1)
