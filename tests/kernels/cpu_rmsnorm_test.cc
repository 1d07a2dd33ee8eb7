// CPU tests of the batch-invariant RMSNorm's twin: close to an fp64 reference, block size a
// function of the hidden size only, residual semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "detrace/kernels/rmsnorm.h"

namespace detrace::kernels {
namespace {

TEST(RmsNormCpu, BlockSizeDependsOnHiddenOnly) {
  for (int64_t h : {1, 7, 8, 100, 1024, 4096, 8192, 12288, 40000, 1 << 20}) {
    const int t = rmsNormThreads(h);
    EXPECT_EQ(t % 32, 0) << h;
    EXPECT_GE(t, 32);
    EXPECT_LE(t, 1024);
  }
  EXPECT_EQ(rmsNormThreads(8192), 256);
}

TEST(RmsNormCpu, TwinIsCloseToFp64Reference) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const float eps = 1e-6f;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t hidden : {1, 5, 64, 1000, 4096, 40000}) {
      const int64_t rows = 3;
      const size_t n = static_cast<size_t>(rows * hidden);
      std::vector<unsigned char> x(n * 4), w(static_cast<size_t>(hidden) * 4), y(n * 4);
      for (size_t i = 0; i < n; ++i) storeFromFloat(x.data(), i, dtype, normal(rng));
      for (int64_t i = 0; i < hidden; ++i) {
        storeFromFloat(w.data(), static_cast<size_t>(i), dtype, 1.0f + normal(rng) / 8);
      }
      ASSERT_TRUE(rmsNormCpu(x.data(), w.data(), y.data(), rows, hidden, eps, dtype).isOk());
      const double tol = dtype == DType::kF32 ? 1e-5 : (dtype == DType::kF16 ? 2e-3 : 1.6e-2);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < hidden; ++i) {
          const double v =
              static_cast<double>(loadAsFloat(x.data(), static_cast<size_t>(r * hidden + i), dtype));
          ss += v * v;
        }
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + static_cast<double>(eps));
        for (int64_t i = 0; i < hidden; ++i) {
          const auto at = static_cast<size_t>(r * hidden + i);
          const double ref = static_cast<double>(loadAsFloat(x.data(), at, dtype)) * inv *
                             static_cast<double>(loadAsFloat(w.data(), static_cast<size_t>(i), dtype));
          ASSERT_NEAR(static_cast<double>(loadAsFloat(y.data(), at, dtype)), ref, tol * (1 + std::abs(ref)))
              << dtypeName(dtype) << " hidden " << hidden << " row " << r << " col " << i;
        }
      }
    }
  }
}

TEST(RmsNormCpu, ResidualIsAddedThenNormalised) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 2, hidden = 300;
  const size_t n = static_cast<size_t>(rows * hidden);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<unsigned char> x(n * 4), res(n * 4), w(static_cast<size_t>(hidden) * 4),
        y(n * 4), y2(n * 4);
    for (size_t i = 0; i < n; ++i) {
      storeFromFloat(x.data(), i, dtype, normal(rng));
      storeFromFloat(res.data(), i, dtype, normal(rng));
    }
    for (int64_t i = 0; i < hidden; ++i) storeFromFloat(w.data(), static_cast<size_t>(i), dtype, 1.5f);
    std::vector<unsigned char> sum(n * 4);
    for (size_t i = 0; i < n; ++i) {
      storeFromFloat(sum.data(), i, dtype,
                     loadAsFloat(x.data(), i, dtype) + loadAsFloat(res.data(), i, dtype));
    }
    ASSERT_TRUE(rmsNormAddResidualCpu(x.data(), res.data(), w.data(), y.data(), rows, hidden, 1e-5f,
                                      dtype)
                    .isOk());
    ASSERT_TRUE(rmsNormCpu(sum.data(), w.data(), y2.data(), rows, hidden, 1e-5f, dtype).isOk());
    EXPECT_EQ(res, sum) << dtypeName(dtype);
    EXPECT_EQ(y, y2) << dtypeName(dtype);
  }
}

TEST(RmsNormCpu, RejectsBadShapes) {
  float x = 1, w = 1, y = 0;
  EXPECT_FALSE(rmsNormCpu(&x, &w, &y, 1, 0, 1e-5f, DType::kF32).isOk());
  EXPECT_FALSE(rmsNormCpu(&x, &w, &y, -1, 1, 1e-5f, DType::kF32).isOk());
}

}  // namespace
}  // namespace detrace::kernels
