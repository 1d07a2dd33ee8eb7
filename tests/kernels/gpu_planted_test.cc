// The planted defects must really misbehave on the GPU, or detrace's detectors cannot be tested
// against them: the racy reduction gives different bits from run to run, and the batch-variant
// RMSNorm gives a row different bits when the number of rows crosses 64.
#include <set>

#include "detrace/kernels/digest.h"
#include "detrace/kernels/reduce.h"
#include "detrace/kernels/rmsnorm.h"
#include "kernels_gpu_util.h"

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;

class PlantedGpuTest : public testing::GpuTest {};

TEST_F(PlantedGpuTest, RacyReduceIsNondeterministic) {
  DETRACE_REQUIRE_GPU();
  const int n = 8;
  const size_t count = size_t{1} << 22;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<DeviceBuffer> bufs;
    std::vector<const void*> in;
    std::vector<unsigned char> host(count * dtypeSize(dtype));
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < count; ++i) storeFromFloat(host.data(), i, dtype, normal(rng_));
      bufs.emplace_back(host.size());
      ASSERT_TRUE(bufs.back().ok());
      bufs.back().upload(host.data(), host.size());
      in.push_back(bufs.back().get());
    }
    DeviceBuffer out(host.size());
    std::set<uint64_t> distinct;
    const int runs = 20;
    for (int run = 0; run < runs; ++run) {
      out.poison();
      ASSERT_TRUE(planted_racyReduce(in.data(), n, out.get(), count, dtype, nullptr).isOk());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto bytes = out.download(host.size());
      distinct.insert(digestCpu(bytes.data(), bytes.size()));
    }
    std::printf("planted_racyReduce %s: %zu distinct outputs in %d runs\n", dtypeName(dtype),
                distinct.size(), runs);
    EXPECT_GE(distinct.size(), 2u) << dtypeName(dtype) << ": the race never showed in " << runs
                                   << " runs";
  }
}

// Rows 0..62 normalised in a batch of 63 (the invariant kernel) and in a batch of 128 (the other
// summation order). In fp32 a changed sum shows in the output bits; in bf16 the final rounding
// hides most of it, so bf16 is only reported.
TEST_F(PlantedGpuTest, BatchVariantRmsNormChangesRowsWithBatchSize) {
  DETRACE_REQUIRE_GPU();
  const int64_t hidden = 8192, small = 63, large = 128;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const size_t es = dtypeSize(dtype);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    std::vector<unsigned char> x(static_cast<size_t>(large * hidden) * es), w(hidden * es);
    for (size_t i = 0; i < x.size() / es; ++i) storeFromFloat(x.data(), i, dtype, normal(rng_));
    for (size_t i = 0; i < w.size() / es; ++i) {
      storeFromFloat(w.data(), i, dtype, 1 + normal(rng_) / 8);
    }
    DeviceBuffer dx(x.size()), dw(w.size()), dy_small(x.size()), dy_large(x.size()),
        dy_ref(x.size());
    ASSERT_TRUE(dx.ok() && dw.ok() && dy_small.ok() && dy_large.ok() && dy_ref.ok());
    dx.upload(x.data(), x.size());
    dw.upload(w.data(), w.size());
    dy_small.poison();
    dy_large.poison();
    dy_ref.poison();
    ASSERT_TRUE(planted_batchVariantRmsNorm(dx.get(), dw.get(), dy_small.get(), small, hidden,
                                            1e-6f, dtype, nullptr).isOk());
    ASSERT_TRUE(planted_batchVariantRmsNorm(dx.get(), dw.get(), dy_large.get(), large, hidden,
                                            1e-6f, dtype, nullptr).isOk());
    ASSERT_TRUE(rmsNorm(dx.get(), dw.get(), dy_ref.get(), small, hidden, 1e-6f, dtype, nullptr)
                    .isOk());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const size_t row_bytes = static_cast<size_t>(hidden) * es;
    const auto a = dy_small.download(small * row_bytes);
    const auto b = dy_large.download(small * row_bytes);
    EXPECT_EQ(a, dy_ref.download(small * row_bytes)) << "below 64 rows it is the invariant kernel";
    int changed_rows = 0;
    for (int64_t r = 0; r < small; ++r) {
      changed_rows += std::memcmp(a.data() + r * row_bytes, b.data() + r * row_bytes, row_bytes) != 0;
    }
    std::printf("planted_batchVariantRmsNorm %s: %d of %lld rows changed between M=%lld and "
                "M=%lld\n", dtypeName(dtype), changed_rows, static_cast<long long>(small),
                static_cast<long long>(small), static_cast<long long>(large));
    if (dtype == DType::kF32) {
      EXPECT_GT(changed_rows, 0) << "the same rows gave the same bits at M=" << small
                                 << " and M=" << large;
    }
  }
}

}  // namespace
}  // namespace detrace::kernels
