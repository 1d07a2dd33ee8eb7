// CPU tests of the digest: the hand-written XXH64 (shared with the GPU kernels) against libxxhash,
// and the properties the definition promises (detrace/kernels/digest.h).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "detrace/kernels/digest.h"
#include "detrace/kernels/xxh64.h"

namespace detrace::kernels {
namespace {

std::vector<unsigned char> randomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

constexpr size_t kC = kDigestChunkBytes;  // the chunk size C of the definition

class DigestCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }
  std::string seedNote() const { return "seed " + std::to_string(seed_); }
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

TEST_F(DigestCpuTest, Xxh64MatchesLibxxhash) {
  const auto data = randomBytes(20000, rng_);
  for (size_t len :
       {0, 1, 3, 4, 7, 8, 15, 31, 32, 33, 63, 64, 65, 100, 1023, 1024, 1025, 4095, 4096, 19999}) {
    for (size_t offset : {0, 1, 5}) {
      const uint64_t seed = rng_();
      EXPECT_EQ(xxh::xxh64(data.data() + offset, len, seed), XXH64(data.data() + offset, len, seed))
          << "len " << len << " offset " << offset << ", " << seedNote();
    }
  }
  for (int i = 0; i < 200; ++i) {
    const size_t len = rng_() % 10000;
    const uint64_t seed = rng_() % 4;
    EXPECT_EQ(xxh::xxh64(data.data(), len, seed), XXH64(data.data(), len, seed)) << seedNote();
  }
}

TEST_F(DigestCpuTest, FinalStepMatchesDefinition) {
  for (int i = 0; i < 100; ++i) {
    const uint64_t sum = rng_(), len = rng_();
    EXPECT_EQ(xxh::digestFinal(sum, len), digestFinalCpu(sum, len)) << seedNote();
  }
}

TEST_F(DigestCpuTest, ChunkSizeIsThe1024OfTheDefinition) {
  EXPECT_EQ(kDigestChunkBytes, 1024u);  // changing it changes every recorded digest
}

// Pins the definition: recorded traces hold digests, so any change to it (chunk size, seeds, the
// final step) must be deliberate and come with a trace-format version bump. Bytes (i*131+7) mod 256.
TEST_F(DigestCpuTest, KnownAnswers) {
  const std::pair<size_t, uint64_t> known[] = {{0, 0xaf09f71516247c32ull},
                                               {1, 0xe0b5259a37a582b0ull},
                                               {1024, 0xd5de558b81f12923ull},
                                               {5000, 0x1d88ab96edc38720ull},
                                               {70000, 0x8e0d533f35fed730ull}};
  for (const auto& [len, want] : known) {
    std::vector<unsigned char> data(len);
    for (size_t i = 0; i < len; ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
    EXPECT_EQ(digestCpu(data.data(), len), want) << "len " << len;
  }
}

TEST_F(DigestCpuTest, MatchesDefinitionWrittenOut) {
  for (size_t len : {size_t{0}, size_t{1}, kC - 1, kC, kC + 1, 3 * kC + 17, 70 * kC + 5}) {
    const auto data = randomBytes(len, rng_);
    uint64_t sum = 0;
    for (size_t off = 0, i = 0; off < len; off += kC, ++i) {
      sum += xxh::xxh64(data.data() + off, std::min<size_t>(kC, len - off), i);
    }
    unsigned char tail[16];
    std::memcpy(tail, &sum, 8);
    const uint64_t len64 = len;
    std::memcpy(tail + 8, &len64, 8);
    EXPECT_EQ(digestCpu(data.data(), len), XXH64(tail, 16, 0)) << "len " << len;
  }
}

TEST_F(DigestCpuTest, EmptyBufferIsFinalOfZero) {
  EXPECT_EQ(digestCpu(nullptr, 0), digestFinalCpu(0, 0));
}

TEST_F(DigestCpuTest, EverySingleBitFlipChangesIt) {
  auto data = randomBytes(2 * kC + 100, rng_);
  const uint64_t base = digestCpu(data.data(), data.size());
  for (size_t byte : {size_t{0}, kC - 1, kC, data.size() - 1}) {
    for (int bit = 0; bit < 8; ++bit) {
      data[byte] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_NE(digestCpu(data.data(), data.size()), base) << "byte " << byte << " bit " << bit;
      data[byte] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  for (int i = 0; i < 200; ++i) {
    const size_t byte = rng_() % data.size();
    const int bit = static_cast<int>(rng_() % 8);
    data[byte] ^= static_cast<unsigned char>(1u << bit);
    EXPECT_NE(digestCpu(data.data(), data.size()), base) << seedNote();
    data[byte] ^= static_cast<unsigned char>(1u << bit);
  }
}

TEST_F(DigestCpuTest, SwappingChunksOrBytesChangesIt) {
  auto data = randomBytes(4 * kC, rng_);
  const uint64_t base = digestCpu(data.data(), data.size());
  auto swapped = data;
  std::swap_ranges(swapped.begin(), swapped.begin() + kC, swapped.begin() + 2 * kC);
  EXPECT_NE(digestCpu(swapped.data(), swapped.size()), base) << "chunks 0 and 2 swapped";
  auto bytes = data;
  bytes[10] = data[11];
  bytes[11] = data[10];
  if (data[10] != data[11]) {
    EXPECT_NE(digestCpu(bytes.data(), bytes.size()), base);
  }
  // Equal chunks at different positions still hash differently (the seed is the chunk index).
  std::vector<unsigned char> same(2 * kC, 0x5a);
  EXPECT_NE(xxh::xxh64(same.data(), kC, 0), xxh::xxh64(same.data(), kC, 1));
}

TEST_F(DigestCpuTest, LengthIsPartOfIt) {
  std::vector<unsigned char> zeros(kC + 1, 0);
  EXPECT_NE(digestCpu(zeros.data(), kC), digestCpu(zeros.data(), kC + 1));
  EXPECT_NE(digestCpu(zeros.data(), 0), digestCpu(zeros.data(), 1));
}

TEST_F(DigestCpuTest, RowsAreIndependentDigests) {
  const uint32_t rows = 5;
  const uint64_t row_bytes = 5000, stride = 5003;
  const auto data = randomBytes(rows * stride, rng_);
  std::vector<uint64_t> out(rows);
  digestRowsCpu(data.data(), rows, row_bytes, stride, out.data());
  for (uint32_t r = 0; r < rows; ++r) {
    EXPECT_EQ(out[r], digestCpu(data.data() + r * stride, row_bytes)) << "row " << r;
  }
}

}  // namespace
}  // namespace detrace::kernels
