// Helpers shared by the kernels' GPU suites: an owning device buffer, seeded randomness that is
// printed on failure, and poisoning of outputs before each GPU run.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/gpu_test.h"

namespace detrace::testing {

// Owner of one cudaMalloc'ed buffer.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }

  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }
  unsigned char* get() const { return static_cast<unsigned char*>(ptr_); }
  size_t bytes() const { return bytes_; }

  void upload(const void* src, size_t n, size_t offset = 0) const {
    ASSERT_EQ(cudaMemcpy(get() + offset, src, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void poison(unsigned char value = 0xff) const {
    ASSERT_EQ(cudaMemset(ptr_, value, bytes_), cudaSuccess);
  }
  std::vector<unsigned char> download(size_t n, size_t offset = 0) const {
    std::vector<unsigned char> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), get() + offset, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A test fixture base: requires a GPU, makes device 0's primary context current, and seeds a
// generator from std::random_device (the seed is attached to every failure message).
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DETRACE_REQUIRE_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
    seed_ = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "random seed " + std::to_string(seed_));
  }
  void TearDown() override { trace_.reset(); }

  std::vector<unsigned char> randomBytes(size_t n) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t r = rng_();
      std::memcpy(v.data() + i, &r, 8);
    }
    for (size_t i = n / 8 * 8; i < n; ++i) v[i] = static_cast<unsigned char>(rng_());
    return v;
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

}  // namespace detrace::testing
