// How `detrace diff` names a collective across ranks (diff_internal.h's collectiveIdOf, which
// propagation across ranks keys on): a collective by its communicator and number; a send and the
// receive that takes it by the same id on both ranks, apart from the collectives' ids and from
// the messages that go the other way.
#include <random>

#include <gtest/gtest.h>

#include "../../replay/src/diff_internal.h"

namespace detrace::replay {
namespace {

db::Collective call(db::CollOp op, int64_t comm, int32_t rank, int32_t peer, int64_t seq) {
  db::Collective c;
  c.op = op;
  c.comm_id = comm;
  c.comm_rank = rank;
  c.comm_nranks = 8;
  c.peer = peer;
  c.comm_seq = seq;
  return c;
}

TEST(CollectiveId, ASendAndTheReceiveThatTakesItShareAnIdNoCollectiveHas) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t comm = static_cast<int64_t>(rng() >> 1);
    const auto from = static_cast<int32_t>(rng() % 8);
    const auto to = static_cast<int32_t>((from + 1 + rng() % 7) % 8);
    const auto n = static_cast<int64_t>(rng() % 1000);
    SCOPED_TRACE(testing::Message() << comm << " " << from << " -> " << to << " #" << n);
    const CollectiveId send = collectiveIdOf(call(db::CollOp::kSend, comm, from, to, n));
    const CollectiveId recv = collectiveIdOf(call(db::CollOp::kRecv, comm, to, from, n));
    EXPECT_EQ(send, recv);
    EXPECT_EQ(send.second, n);
    EXPECT_GE(send.first, 0) << "ids are stored as non-negative 63-bit numbers";
    EXPECT_NE(send.first, comm) << "a message is not the communicator's collective of that number";
    // The message the other way, and one to another peer, are other messages.
    EXPECT_NE(send, collectiveIdOf(call(db::CollOp::kSend, comm, to, from, n)));
    EXPECT_NE(send, collectiveIdOf(call(db::CollOp::kSend, comm, from, (to + 1) % 8 == from ? (to + 2) % 8 : (to + 1) % 8, n)));
    // A collective is its communicator and number, whatever its peer field holds.
    EXPECT_EQ(collectiveIdOf(call(db::CollOp::kAllReduce, comm, from, -1, n)), (CollectiveId{comm, n}));
  }
}

}  // namespace
}  // namespace detrace::replay
