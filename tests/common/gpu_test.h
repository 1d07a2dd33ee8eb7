// Helpers for GPU test suites (ctest label `gpu`). Without a CUDA device each test SKIPs with a
// reason, and ctest reports it as Skipped, never as passed.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace detrace::testing {

// True when at least one CUDA device is usable by this process.
inline bool haveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace detrace::testing

#define DETRACE_REQUIRE_GPU()                                                     \
  do {                                                                            \
    if (!::detrace::testing::haveGpu()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

// Fails the current test with the CUDA error string when a runtime call fails.
#define DETRACE_CUDA_CHECK(call)                                                        \
  do {                                                                                  \
    cudaError_t detrace_err_ = (call);                                                  \
    ASSERT_EQ(detrace_err_, cudaSuccess) << #call << ": " << cudaGetErrorString(detrace_err_); \
  } while (0)
