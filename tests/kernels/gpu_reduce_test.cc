// Fixed-order reduction on the GPU against its CPU twin, bit for bit, for every dtype and order,
// odd counts, unaligned inputs, and repeated runs.
#include <cmath>

#include "detrace/kernels/reduce.h"
#include "kernels_gpu_util.h"

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;

class ReduceGpuTest : public testing::GpuTest {
 protected:
  // Fills `n` device inputs of `count` elements (at byte `offset` into each buffer) with random
  // values of mixed magnitude, keeps host copies, and returns the device input pointers.
  std::vector<const void*> makeInputs(int n, size_t count, DType dtype, size_t offset) {
    const size_t es = dtypeSize(dtype);
    host_.assign(static_cast<size_t>(n), std::vector<unsigned char>(count * es));
    dev_.clear();
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<const void*> ptrs;
    for (int k = 0; k < n; ++k) {
      auto& h = host_[static_cast<size_t>(k)];
      for (size_t i = 0; i < count; ++i) {
        const float scale = std::ldexp(1.0f, static_cast<int>(rng_() % 16) - 8);
        storeFromFloat(h.data(), i, dtype, normal(rng_) * scale);
      }
      dev_.emplace_back(count * es + offset + 16);
      EXPECT_TRUE(dev_.back().ok());
      dev_.back().upload(h.data(), h.size(), offset);
      ptrs.push_back(dev_.back().get() + offset);
    }
    return ptrs;
  }
  std::vector<const void*> hostPtrs() const {
    std::vector<const void*> p;
    for (const auto& h : host_) p.push_back(h.data());
    return p;
  }
  std::vector<unsigned char> runGpu(const std::vector<const void*>& in, size_t count, DType dtype,
                                    ReduceOrder order, int start, size_t out_offset = 0) {
    DeviceBuffer out(count * dtypeSize(dtype) + out_offset + 16);
    out.poison();
    const Status s = fixedOrderReduce(in.data(), static_cast<int>(in.size()),
                                      out.get() + out_offset, count, dtype, order, start, nullptr);
    EXPECT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return out.download(count * dtypeSize(dtype), out_offset);
  }
  std::vector<unsigned char> runCpu(size_t count, DType dtype, ReduceOrder order, int start) {
    std::vector<unsigned char> out(count * dtypeSize(dtype), 0xff);
    const auto in = hostPtrs();
    EXPECT_TRUE(fixedOrderReduceCpu(in.data(), static_cast<int>(in.size()), out.data(), count,
                                    dtype, order, start)
                    .isOk());
    return out;
  }

  std::vector<std::vector<unsigned char>> host_;
  std::vector<DeviceBuffer> dev_;
};

constexpr ReduceOrder kOrders[] = {ReduceOrder::kRankOrder, ReduceOrder::kReversed,
                                   ReduceOrder::kRing, ReduceOrder::kTree};
constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST_F(ReduceGpuTest, MatchesCpuBitForBit) {
  DETRACE_REQUIRE_GPU();
  for (DType dtype : kTypes) {
    for (int n : {1, 2, 3, 5, 8, 13}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{1000003}}) {
        const auto in = makeInputs(n, count, dtype, 0);
        for (ReduceOrder order : kOrders) {
          const int start = static_cast<int>(rng_() % static_cast<uint64_t>(n));
          ASSERT_EQ(runGpu(in, count, dtype, order, start), runCpu(count, dtype, order, start))
              << dtypeName(dtype) << " n " << n << " count " << count << " "
              << reduceOrderName(order) << " start " << start;
        }
      }
    }
  }
}

TEST_F(ReduceGpuTest, UnalignedPointersGiveTheSameBits) {
  DETRACE_REQUIRE_GPU();
  for (DType dtype : kTypes) {
    const size_t count = 100003;
    const auto in = makeInputs(4, count, dtype, dtypeSize(dtype));  // not 16-byte aligned
    for (ReduceOrder order : kOrders) {
      ASSERT_EQ(runGpu(in, count, dtype, order, 1, 2 * dtypeSize(dtype)),
                runCpu(count, dtype, order, 1))
          << dtypeName(dtype) << " " << reduceOrderName(order);
    }
  }
}

TEST_F(ReduceGpuTest, ManyRanksTree) {
  DETRACE_REQUIRE_GPU();
  for (int n : {kMaxReduceRanks - 1, kMaxReduceRanks}) {
    const size_t count = 20001;
    const auto in = makeInputs(n, count, DType::kBF16, 0);
    ASSERT_EQ(runGpu(in, count, DType::kBF16, ReduceOrder::kTree, 5),
              runCpu(count, DType::kBF16, ReduceOrder::kTree, 5))
        << "n " << n;
  }
}

TEST_F(ReduceGpuTest, DeterministicOverRepeatsAndOrdersDiffer) {
  DETRACE_REQUIRE_GPU();
  const size_t count = 1 << 22;
  const auto in = makeInputs(8, count, DType::kF32, 0);
  const auto first = runGpu(in, count, DType::kF32, ReduceOrder::kRing, 3);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(runGpu(in, count, DType::kF32, ReduceOrder::kRing, 3), first) << "repeat " << i;
  }
  // The order is real: another order changes some bits on this data.
  EXPECT_NE(runGpu(in, count, DType::kF32, ReduceOrder::kReversed, 0), first);
}

TEST_F(ReduceGpuTest, RejectsBadArguments) {
  DETRACE_REQUIRE_GPU();
  DeviceBuffer a(64);
  const void* in[] = {a.get()};
  EXPECT_EQ(fixedOrderReduce(in, 1, a.get(), 4, DType::kF32, ReduceOrder::kRing, 2, nullptr).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(fixedOrderReduce(in, 0, a.get(), 4, DType::kF32, ReduceOrder::kRing, 0, nullptr).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace detrace::kernels
