// LateComms: handles NCCL writes after the call returned, claimed at their first use.
#include "detrace/tracer/late_comms.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace detrace::tracer {
namespace {

// Distinct handles: addresses of objects that stay alive for the test.
struct Handles {
  std::vector<std::unique_ptr<int>> objects;
  const void* make() { return objects.emplace_back(std::make_unique<int>(0)).get(); }
};

CommInfo info(int64_t id) { return CommInfo{id, -1, -1, 3}; }

TEST(LateComms, TheSlotThatHoldsTheHandleClaimsIt) {
  Handles h;
  LateComms late;
  EXPECT_FALSE(late.anyExpected());
  const void* slot_a = nullptr;
  const void* slot_b = nullptr;
  late.expect(&slot_a, info(11));
  late.expect(&slot_b, info(22));
  EXPECT_TRUE(late.anyExpected());
  // NCCL writes both handles (b first); each use finds its own slot, whatever the order.
  const void* b = h.make();
  const void* a = h.make();
  slot_b = b;
  slot_a = a;
  auto claim_b = late.claim(b);
  EXPECT_EQ(claim_b.outcome, LateComms::Outcome::kFollowed);
  EXPECT_EQ(claim_b.info.id, 22);
  EXPECT_EQ(claim_b.info.device, 3);
  auto claim_a = late.claim(a);
  EXPECT_EQ(claim_a.outcome, LateComms::Outcome::kFollowed);
  EXPECT_EQ(claim_a.info.id, 11);
  EXPECT_FALSE(late.anyExpected());
  // Claimed once: the same handle again is a stranger (the registry knows it by then).
  EXPECT_EQ(late.claim(a).outcome, LateComms::Outcome::kStranger);
}

TEST(LateComms, AHandleNoSlotHoldsIsAStrangerOnceThenSeenUntilForgotten) {
  Handles h;
  LateComms late;
  const void* slot = nullptr;
  late.expect(&slot, info(5));
  const void* moved = h.make();
  slot = moved;
  slot = nullptr;  // the program moved the handle elsewhere before using it
  EXPECT_EQ(late.claim(moved).outcome, LateComms::Outcome::kStranger);
  EXPECT_EQ(late.claim(moved).outcome, LateComms::Outcome::kSeen);
  EXPECT_TRUE(late.anyExpected());  // the slot may still be written (another split)
  // Destroyed; NCCL gives the address to the communicator the slot now expects.
  late.forget(moved);
  slot = moved;
  auto claim = late.claim(moved);
  EXPECT_EQ(claim.outcome, LateComms::Outcome::kFollowed);
  EXPECT_EQ(claim.info.id, 5);
}

TEST(LateComms, ANewerExpectationOnTheSameSlotReplacesTheOlder) {
  Handles h;
  LateComms late;
  const void* slot = nullptr;
  late.expect(&slot, info(1));
  late.expect(&slot, info(2));  // the program split again into the same slot
  const void* second = h.make();
  slot = second;
  auto claim = late.claim(second);
  EXPECT_EQ(claim.outcome, LateComms::Outcome::kFollowed);
  EXPECT_EQ(claim.info.id, 2);
  EXPECT_FALSE(late.anyExpected()) << "the older expectation went with the newer";
}

// A slot in memory the program has unmapped since: read without a fault, and matches nothing.
TEST(LateComms, ASlotInUnmappedMemoryIsReadWithoutAFault) {
  Handles h;
  const long page = ::sysconf(_SC_PAGESIZE);
  void* mem = ::mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* slot = static_cast<const void**>(mem);
  const void* handle = h.make();
  *slot = handle;
  EXPECT_EQ(LateComms::readSlot(slot), std::optional<const void*>(handle));
  LateComms late;
  late.expect(slot, info(9));
  ASSERT_EQ(::munmap(mem, static_cast<size_t>(page)), 0);
  EXPECT_EQ(LateComms::readSlot(slot), std::nullopt);
  EXPECT_EQ(late.claim(handle).outcome, LateComms::Outcome::kStranger);
  EXPECT_EQ(LateComms::readSlot(nullptr), std::nullopt);
}

TEST(LateComms, BoundedInSlotsAndStrangers) {
  Handles h;
  LateComms late;
  std::vector<const void*> slots(LateComms::kMaxExpected + 1, nullptr);
  for (size_t i = 0; i < slots.size(); ++i) late.expect(&slots[i], info(static_cast<int64_t>(i)));
  // The oldest was dropped: its handle is a stranger; the newest is followed.
  slots.front() = h.make();
  EXPECT_EQ(late.claim(slots.front()).outcome, LateComms::Outcome::kStranger);
  slots.back() = h.make();
  auto claim = late.claim(slots.back());
  EXPECT_EQ(claim.outcome, LateComms::Outcome::kFollowed);
  EXPECT_EQ(claim.info.id, static_cast<int64_t>(LateComms::kMaxExpected));
  // Strangers beyond the bound are no longer counted as new.
  for (size_t i = 1; i < LateComms::kMaxStrangers; ++i) {
    EXPECT_EQ(late.claim(h.make()).outcome, LateComms::Outcome::kStranger);
  }
  EXPECT_EQ(late.claim(h.make()).outcome, LateComms::Outcome::kSeen);
}

// Many threads split and use their communicators at once (as one thread per GPU does): each
// claims its own, whatever the interleaving.
TEST(LateComms, ThreadsClaimTheirOwnHandles) {
  constexpr int kThreads = 8, kEach = 20;
  LateComms late;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(std::random_device{}());
      for (int i = 0; i < kEach; ++i) {
        auto slot = std::make_unique<const void*>(nullptr);
        auto object = std::make_unique<int>(0);
        const int64_t id = t * 1000 + i + static_cast<int64_t>(rng() % 7) * 100000;
        late.expect(slot.get(), info(id));
        *slot = object.get();
        auto claim = late.claim(object.get());
        if (claim.outcome != LateComms::Outcome::kFollowed || claim.info.id != id) ++wrong[t];
        late.forget(object.get());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_FALSE(late.anyExpected());
}

}  // namespace
}  // namespace detrace::tracer
