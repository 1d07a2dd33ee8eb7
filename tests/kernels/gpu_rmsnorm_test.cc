// Batch-invariant RMSNorm on the GPU: bit-identical to the CPU twin, to itself over repeats, and
// for a row whatever the batch around it (number of rows, position, alignment).
#include "detrace/kernels/rmsnorm.h"
#include "kernels_gpu_util.h"

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
constexpr float kEps = 1e-6f;

class RmsNormGpuTest : public testing::GpuTest {
 protected:
  std::vector<unsigned char> randomValues(size_t n, DType dtype, float mean = 0.0f) {
    std::normal_distribution<float> normal(mean, 1.5f);
    std::vector<unsigned char> v(n * dtypeSize(dtype));
    for (size_t i = 0; i < n; ++i) storeFromFloat(v.data(), i, dtype, normal(rng_));
    return v;
  }

  // Runs the GPU norm (with or without residual) on host data placed `offset` bytes into device
  // buffers; returns y (and updates `res` with the GPU's residual output when given).
  std::vector<unsigned char> gpuNorm(const std::vector<unsigned char>& x,
                                     std::vector<unsigned char>* res,
                                     const std::vector<unsigned char>& w, int64_t rows,
                                     int64_t hidden, DType dtype, size_t offset = 0) {
    DeviceBuffer dx(x.size() + offset), dw(w.size() + offset), dy(x.size() + offset),
        dr(x.size() + offset);
    EXPECT_TRUE(dx.ok() && dw.ok() && dy.ok() && dr.ok());
    dx.upload(x.data(), x.size(), offset);
    dw.upload(w.data(), w.size(), offset);
    dy.poison();
    Status s;
    if (res != nullptr) {
      dr.upload(res->data(), res->size(), offset);
      s = rmsNormAddResidual(dx.get() + offset, dr.get() + offset, dw.get() + offset,
                             dy.get() + offset, rows, hidden, kEps, dtype, nullptr);
    } else {
      s = rmsNorm(dx.get() + offset, dw.get() + offset, dy.get() + offset, rows, hidden, kEps,
                  dtype, nullptr);
    }
    EXPECT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (res != nullptr) *res = dr.download(res->size(), offset);
    return dy.download(x.size(), offset);
  }
};

TEST_F(RmsNormGpuTest, MatchesCpuBitForBit) {
  DETRACE_REQUIRE_GPU();
  for (DType dtype : kTypes) {
    for (int64_t hidden : {1, 7, 8, 100, 1024, 4096, 5123, 8192, 40000}) {
      for (int64_t rows : {1, 3, 65}) {
        const size_t n = static_cast<size_t>(rows * hidden);
        const auto x = randomValues(n, dtype);
        const auto w = randomValues(static_cast<size_t>(hidden), dtype, 1.0f);
        std::vector<unsigned char> want(x.size());
        ASSERT_TRUE(rmsNormCpu(x.data(), w.data(), want.data(), rows, hidden, kEps, dtype).isOk());
        ASSERT_EQ(gpuNorm(x, nullptr, w, rows, hidden, dtype), want)
            << dtypeName(dtype) << " " << rows << " x " << hidden;

        auto res_gpu = randomValues(n, dtype);
        auto res_cpu = res_gpu;
        ASSERT_TRUE(rmsNormAddResidualCpu(x.data(), res_cpu.data(), w.data(), want.data(), rows,
                                          hidden, kEps, dtype)
                        .isOk());
        ASSERT_EQ(gpuNorm(x, &res_gpu, w, rows, hidden, dtype), want)
            << "residual " << dtypeName(dtype) << " " << rows << " x " << hidden;
        ASSERT_EQ(res_gpu, res_cpu) << "residual output " << dtypeName(dtype);
      }
    }
  }
}

TEST_F(RmsNormGpuTest, UnalignedBuffersGiveTheSameBits) {
  DETRACE_REQUIRE_GPU();
  for (DType dtype : kTypes) {
    const int64_t rows = 5, hidden = 4096;
    const auto x = randomValues(static_cast<size_t>(rows * hidden), dtype);
    const auto w = randomValues(static_cast<size_t>(hidden), dtype, 1.0f);
    EXPECT_EQ(gpuNorm(x, nullptr, w, rows, hidden, dtype, dtypeSize(dtype)),
              gpuNorm(x, nullptr, w, rows, hidden, dtype, 0))
        << dtypeName(dtype);
  }
}

TEST_F(RmsNormGpuTest, RowsDoNotDependOnBatchSize) {
  DETRACE_REQUIRE_GPU();
  const int64_t hidden = 8192, max_rows = 300;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const size_t es = dtypeSize(dtype);
    const auto x = randomValues(static_cast<size_t>(max_rows * hidden), dtype);
    const auto w = randomValues(static_cast<size_t>(hidden), dtype, 1.0f);
    const auto full = gpuNorm(x, nullptr, w, max_rows, hidden, dtype);
    const size_t row_bytes = static_cast<size_t>(hidden) * es;
    for (int64_t m : {1, 2, 7, 63, 64, 65, 128, 257}) {
      // The last m rows, run as a batch of m: each row must equal its bits in the big batch.
      const size_t first = static_cast<size_t>(max_rows - m);
      std::vector<unsigned char> sub(x.begin() + static_cast<ptrdiff_t>(first * row_bytes), x.end());
      const auto y = gpuNorm(sub, nullptr, w, m, hidden, dtype);
      ASSERT_TRUE(std::equal(y.begin(), y.end(),
                             full.begin() + static_cast<ptrdiff_t>(first * row_bytes)))
          << dtypeName(dtype) << " batch of " << m;
    }
  }
}

TEST_F(RmsNormGpuTest, DeterministicOverRepeats) {
  DETRACE_REQUIRE_GPU();
  const int64_t rows = 1024, hidden = 8192;
  const auto x = randomValues(static_cast<size_t>(rows * hidden), DType::kBF16);
  const auto w = randomValues(static_cast<size_t>(hidden), DType::kBF16, 1.0f);
  const auto first = gpuNorm(x, nullptr, w, rows, hidden, DType::kBF16);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(gpuNorm(x, nullptr, w, rows, hidden, DType::kBF16), first) << "repeat " << i;
  }
}

}  // namespace
}  // namespace detrace::kernels
