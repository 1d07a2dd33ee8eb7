// CPU tests of the fixed-order reduction's definition: leaf orders, the streaming tree against a
// straightforward level-by-level tree, the CPU twin against an fp64 reference, and the host
// bf16/fp16 rounding that the twins rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::kernels {
namespace {

std::vector<int> leaves(ReduceOrder order, int n, int start) {
  std::vector<int> v(static_cast<size_t>(n));
  reduceLeafOrder(order, n, start, v.data());
  return v;
}

TEST(ReduceCpu, LeafOrders) {
  EXPECT_EQ(leaves(ReduceOrder::kRankOrder, 4, 0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(leaves(ReduceOrder::kReversed, 4, 0), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(leaves(ReduceOrder::kRing, 5, 3), (std::vector<int>{3, 4, 0, 1, 2}));
  EXPECT_EQ(leaves(ReduceOrder::kTree, 4, 1), (std::vector<int>{1, 2, 3, 0}));
}

// Straightforward reference tree: pair neighbours level by level, an unpaired last node moves up.
float levelTree(std::vector<float> v) {
  while (v.size() > 1) {
    std::vector<float> next;
    for (size_t i = 0; i + 1 < v.size(); i += 2) next.push_back(v[i] + v[i + 1]);
    if (v.size() % 2 == 1) next.push_back(v.back());
    v = std::move(next);
  }
  return v[0];
}

float reduceOne(const std::vector<float>& per_rank, ReduceOrder order, int start) {
  std::vector<const void*> in;
  for (const float& x : per_rank) in.push_back(&x);
  float out = 0;
  EXPECT_TRUE(fixedOrderReduceCpu(in.data(), static_cast<int>(in.size()), &out, 1, DType::kF32,
                                  order, start)
                  .isOk());
  return out;
}

TEST(ReduceCpu, OrdersComputeTheDocumentedExpressions) {
  // Chosen so that every association gives a different fp32 result.
  const std::vector<float> x = {1e8f, 1.0f, -1e8f, 3.0f, 0.5f};
  const float rank = (((x[0] + x[1]) + x[2]) + x[3]) + x[4];
  const float reversed = (((x[4] + x[3]) + x[2]) + x[1]) + x[0];
  const float ring2 = (((x[2] + x[3]) + x[4]) + x[0]) + x[1];
  const float tree0 = ((x[0] + x[1]) + (x[2] + x[3])) + x[4];
  const float tree1 = ((x[1] + x[2]) + (x[3] + x[4])) + x[0];
  EXPECT_EQ(reduceOne(x, ReduceOrder::kRankOrder, 0), rank);
  EXPECT_EQ(reduceOne(x, ReduceOrder::kReversed, 0), reversed);
  EXPECT_EQ(reduceOne(x, ReduceOrder::kRing, 2), ring2);
  EXPECT_EQ(reduceOne(x, ReduceOrder::kTree, 0), tree0);
  EXPECT_EQ(reduceOne(x, ReduceOrder::kTree, 1), tree1);
  EXPECT_NE(rank, reversed);  // the example does tell the orders apart
}

TEST(ReduceCpu, StreamingTreeEqualsLevelTree) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
  for (int n = 1; n <= kMaxReduceRanks; n += (n < 24 ? 1 : 13)) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = std::ldexp(mag(rng) > 0 ? 1.0f : -1.0f, static_cast<int>(mag(rng))) * (1 + mag(rng) / 64);
      EXPECT_EQ(reduceOne(v, ReduceOrder::kTree, 0), levelTree(v)) << "n " << n;
    }
  }
}

TEST(ReduceCpu, TwinIsCloseToFp64Reference) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t count = 4099;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (ReduceOrder order : {ReduceOrder::kRankOrder, ReduceOrder::kReversed, ReduceOrder::kRing,
                              ReduceOrder::kTree}) {
      const int n = 7;
      std::vector<std::vector<unsigned char>> bufs(n, std::vector<unsigned char>(count * 4));
      std::vector<const void*> in;
      for (auto& b : bufs) {
        for (size_t i = 0; i < count; ++i) storeFromFloat(b.data(), i, dtype, normal(rng));
        in.push_back(b.data());
      }
      std::vector<unsigned char> out(count * 4);
      ASSERT_TRUE(fixedOrderReduceCpu(in.data(), n, out.data(), count, dtype, order, 3).isOk());
      const double tol = dtype == DType::kF32 ? 1e-5 : (dtype == DType::kF16 ? 4e-3 : 3e-2);
      for (size_t i = 0; i < count; ++i) {
        double ref = 0;
        for (int k = 0; k < n; ++k) ref += static_cast<double>(loadAsFloat(in[static_cast<size_t>(k)], i, dtype));
        const double got = loadAsFloat(out.data(), i, dtype);
        ASSERT_NEAR(got, ref, tol * (1 + std::abs(ref)))
            << dtypeName(dtype) << " " << reduceOrderName(order) << " element " << i;
      }
    }
  }
}

TEST(ReduceCpu, RejectsBadArguments) {
  float a = 1, out = 0;
  const void* in[] = {&a};
  EXPECT_FALSE(fixedOrderReduceCpu(in, 0, &out, 1, DType::kF32, ReduceOrder::kRankOrder, 0).isOk());
  EXPECT_FALSE(fixedOrderReduceCpu(in, 1, &out, 1, DType::kF32, ReduceOrder::kRing, 1).isOk());
  EXPECT_FALSE(fixedOrderReduceCpu(in, 1, nullptr, 1, DType::kF32, ReduceOrder::kRing, 0).isOk());
}

// Host rounding used by the CPU twins: every half value round-trips, and rounding of random
// floats picks the nearest representable value, ties to even.
TEST(ReduceCpu, HalfAndBf16RoundToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(floatToHalf(f), h) << std::hex << h;
  }
  std::mt19937 rng(std::random_device{}());
  auto check = [&](float f, auto to, auto from, const char* what) {
    const uint16_t r = to(f);
    const double x = static_cast<double>(f);
    const double got = static_cast<double>(from(r));
    if (std::isinf(got) || r == 0) return;
    const double up = static_cast<double>(from(static_cast<uint16_t>(r + 1)));
    const double down = static_cast<double>(from(static_cast<uint16_t>(r - 1)));
    const double err = std::abs(got - x);
    ASSERT_LE(err, std::abs(up - x)) << what << " " << f;
    ASSERT_LE(err, std::abs(down - x)) << what << " " << f;
    if (err == std::abs(up - x) || err == std::abs(down - x)) {
      ASSERT_EQ(r & 1, 0) << what << " tie " << f;
    }
  };
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = u(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 30));
    if (f <= 0) continue;  // the neighbour logic above assumes positive values
    check(f, floatToHalf, halfToFloat, "fp16");
    check(f, floatToBf16, bf16ToFloat, "bf16");
  }
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // the halfway point to 2^16 rounds to infinity
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0);  // tie with zero rounds to even (zero)
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 1);
}

}  // namespace
}  // namespace detrace::kernels
