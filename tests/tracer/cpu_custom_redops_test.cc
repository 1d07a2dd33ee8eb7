// CustomRedOps: NCCL's custom reduction operators by communicator and number, forgotten when
// destroyed or with their communicator, bounded.
#include "detrace/tracer/custom_redops.h"

#include <bit>
#include <cstdint>

#include <gtest/gtest.h>

namespace detrace::tracer {
namespace {

CustomRedOps::PreMulSum hostScalar(float v) {
  CustomRedOps::PreMulSum op;
  op.datatype = 7;  // ncclFloat32
  op.host = true;
  op.scalar = CustomRedOps::packScalar(&v, sizeof v);
  return op;
}

TEST(CustomRedOps, KnowsOperatorsByCommunicatorAndNumber) {
  CustomRedOps ops;
  int a = 0, b = 0;
  ASSERT_TRUE(ops.add(&a, 5, hostScalar(0.25f)));
  ASSERT_TRUE(ops.add(&b, 5, hostScalar(2.0f)));
  ASSERT_TRUE(ops.find(&a, 5));
  EXPECT_EQ(ops.find(&a, 5)->scalar, std::bit_cast<uint32_t>(0.25f));
  EXPECT_EQ(ops.find(&b, 5)->scalar, std::bit_cast<uint32_t>(2.0f));
  EXPECT_FALSE(ops.find(&a, 6));
  ops.remove(&a, 5);
  EXPECT_FALSE(ops.find(&a, 5));
  EXPECT_TRUE(ops.find(&b, 5));
  // A number handed out again takes its new operator's scalar.
  ASSERT_TRUE(ops.add(&b, 5, hostScalar(3.0f)));
  EXPECT_EQ(ops.find(&b, 5)->scalar, std::bit_cast<uint32_t>(3.0f));
  EXPECT_EQ(ops.size(), 1u);
}

TEST(CustomRedOps, ACommunicatorsOperatorsGoWithIt) {
  CustomRedOps ops;
  int comms[3] = {};
  for (int* c : {&comms[0], &comms[1], &comms[2]}) {
    for (int32_t op = 5; op < 9; ++op) ASSERT_TRUE(ops.add(c, op, hostScalar(1.0f)));
  }
  ops.removeComm(&comms[1]);
  EXPECT_EQ(ops.size(), 8u);
  for (int32_t op = 5; op < 9; ++op) {
    EXPECT_TRUE(ops.find(&comms[0], op));
    EXPECT_FALSE(ops.find(&comms[1], op));
    EXPECT_TRUE(ops.find(&comms[2], op));
  }
}

TEST(CustomRedOps, IsBoundedAndReplacingNeedsNoRoom) {
  CustomRedOps ops;
  int comm = 0;
  for (size_t i = 0; i < CustomRedOps::kMaxOps; ++i) {
    ASSERT_TRUE(ops.add(&comm, static_cast<int32_t>(5 + i), hostScalar(1.0f)));
  }
  EXPECT_FALSE(ops.add(&comm, static_cast<int32_t>(5 + CustomRedOps::kMaxOps), hostScalar(1.0f)));
  EXPECT_TRUE(ops.add(&comm, 5, hostScalar(4.0f)));
  EXPECT_EQ(ops.size(), CustomRedOps::kMaxOps);
}

TEST(CustomRedOps, ScalarsAreTheirBytesZeroExtended) {
  const uint16_t half = 0x3400;  // 0.25 in binary16
  EXPECT_EQ(CustomRedOps::packScalar(&half, sizeof half), 0x3400u);
  const int8_t minus_one = -1;
  EXPECT_EQ(CustomRedOps::packScalar(&minus_one, 1), 0xffu);
  const double d = -0.5;
  EXPECT_EQ(CustomRedOps::packScalar(&d, 8), std::bit_cast<uint64_t>(d));
  EXPECT_EQ(CustomRedOps::packScalar(&d, 16), std::bit_cast<uint64_t>(d)) << "at most 8 bytes";
  EXPECT_EQ(CustomRedOps::packScalar(nullptr, 4), 0u);
}

}  // namespace
}  // namespace detrace::tracer
