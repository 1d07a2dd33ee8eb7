// CPU tests of the GEMM's twin and host logic: the blocked, threaded fp64 reference against a naive
// triple loop, the error metric, and the argument checks every GEMM form shares.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "detrace/kernels/gemm.h"
#include "detrace/kernels/gemm_reference.h"

namespace detrace::kernels {
namespace {

std::vector<uint16_t> randomWords(std::mt19937_64& rng, DType type, size_t count) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> v(count);
  for (auto& w : v) w = type == DType::kBF16 ? floatToBf16(u(rng)) : floatToHalf(u(rng));
  return v;
}

std::vector<double> naiveGemm(int64_t m, int64_t n, int64_t k, DType type,
                              const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  const auto f = [type](uint16_t w) {
    return static_cast<double>(type == DType::kBF16 ? bf16ToFloat(w) : halfToFloat(w));
  };
  std::vector<double> d(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) sum += f(a[i * k + p]) * f(b[j * k + p]);
      d[i * n + j] = sum;
    }
  }
  return d;
}

TEST(GemmCpu, ReferenceMatchesNaiveTripleLoop) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "random seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dim(1, 70);
  for (int iter = 0; iter < 24; ++iter) {
    const DType type = iter % 2 == 0 ? DType::kBF16 : DType::kF16;
    const int64_t m = dim(rng), n = dim(rng), k = dim(rng) * 9;  // K crosses the 256-wide chunks
    const auto a = randomWords(rng, type, static_cast<size_t>(m * k));
    const auto b = randomWords(rng, type, static_cast<size_t>(n * k));
    const auto want = naiveGemm(m, n, k, type, a, b);
    for (int threads : {1, 3}) {
      const auto got = referenceGemmF64(m, n, k, type, a, b, threads);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        // Same products summed in the same K order: equal up to FMA contraction at most.
        ASSERT_NEAR(got[i], want[i], 1e-12 * (1.0 + std::fabs(want[i])))
            << dtypeName(type) << " " << m << "x" << n << "x" << k << " threads " << threads
            << " element " << i;
      }
    }
  }
}

TEST(GemmCpu, CompareToReferenceMeasuresRelativeErrorAndNonFinite) {
  const std::vector<double> ref = {1.0, -2.0, 4.0, 0.0};
  std::vector<float> d = {1.0f, -2.0f, 4.0f, 0.0f};
  GemmError e = compareToReference(DType::kF32, d.data(), ref);
  EXPECT_EQ(e.max_rel, 0.0);
  EXPECT_EQ(e.nonfinite, 0);
  d[2] = 4.04f;  // 1% off
  e = compareToReference(DType::kF32, d.data(), ref);
  EXPECT_NEAR(e.max_rel, 0.01, 1e-6);
  EXPECT_EQ(e.worst_index, 2);
  d[1] = std::numeric_limits<float>::quiet_NaN();
  e = compareToReference(DType::kF32, d.data(), ref);
  EXPECT_EQ(e.nonfinite, 1);
  // A tiny reference value is measured against 1% of the RMS, not against itself.
  const std::vector<uint16_t> bf = {floatToBf16(1.0f), floatToBf16(-2.0f), floatToBf16(4.0f),
                                    floatToBf16(1e-3f)};
  e = compareToReference(DType::kBF16, bf.data(), ref);
  EXPECT_LT(e.max_rel, 0.05);
}

GemmArgs validArgs() {
  alignas(16) static unsigned char buf[64];
  GemmArgs a;
  a.m = 3;
  a.n = 16;
  a.k = 24;
  a.a = buf;
  a.b = buf;
  a.d = buf;
  return a;
}

TEST(GemmCpu, ValidateAcceptsTheDocumentedContract) {
  EXPECT_TRUE(validateGemm(validArgs()).isOk());
  GemmArgs a = validArgs();
  a.out_type = DType::kF32;
  EXPECT_TRUE(validateGemm(a).isOk());
  a = validArgs();
  a.m = 0;
  a.a = a.b = nullptr;
  a.d = nullptr;
  EXPECT_TRUE(validateGemm(a).isOk()) << "M == 0 is a no-op";
}

TEST(GemmCpu, ValidateRejectsBrokenRequirements) {
  const auto rejects = [](const GemmArgs& a, const char* what) {
    const Status s = validateGemm(a);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << what;
    EXPECT_FALSE(s.message().empty()) << what;
  };
  GemmArgs a = validArgs();
  a.k = 20;
  rejects(a, "K % 8 != 0");
  a = validArgs();
  a.n = 12;
  rejects(a, "N % 8 != 0");
  a = validArgs();
  a.m = -1;
  rejects(a, "negative M");
  a = validArgs();
  a.in_type = DType::kF32;
  rejects(a, "fp32 inputs");
  a = validArgs();
  a.out_type = DType::kF16;  // bf16 in, fp16 out
  rejects(a, "mixed 16-bit output");
  a = validArgs();
  a.b = nullptr;
  rejects(a, "null B");
  a = validArgs();
  a.d = static_cast<unsigned char*>(a.d) + 2;
  rejects(a, "misaligned D");
  a = validArgs();
  a.k = int64_t{1} << 32;
  rejects(a, "K too large");
}

TEST(GemmCpu, PlantedWorkspaceFollowsTheSplitRule) {
  GemmArgs a = validArgs();
  a.m = kPlantedSplitKMaxM;
  EXPECT_EQ(planted_splitKWorkspaceBytes(a),
            static_cast<size_t>(kPlantedSplitK * a.m * a.n) * sizeof(float));
  a.m = kPlantedSplitKMaxM + 1;
  EXPECT_EQ(planted_splitKWorkspaceBytes(a), 0u);
}

}  // namespace
}  // namespace detrace::kernels
