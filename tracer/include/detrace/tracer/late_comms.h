// LateComms: communicators whose handle NCCL writes after the call that asked for them returned.
//
// A split or shrink of a non-blocking NCCL communicator returns ncclInProgress with the caller's
// slot (`ncclComm_t* newcomm`) still null; NCCL writes the handle there from its own thread once
// the new communicator is made. The tracer cannot wait for that, and cannot read the slot at any
// later moment it likes: by then the caller may have copied the handle and freed the slot.
//
// So the slot is remembered with what the new communicator is known by (its id, derived when the
// call was made: CommRegistry::deriveSplit/deriveShrink), and the first call on a communicator the
// registry does not know claims it: the caller holds that handle, so NCCL wrote it before, and
// the remembered slot that holds exactly it is the one. Slots are read without faulting
// (process_vm_readv on this process), so a freed slot is at worst a stale value, which matches no
// unknown handle, and the communicator is left unfollowed, never mislabelled.
//
// Thread-safety: all methods may be called from any thread. Bounded: kMaxExpected slots (the
// oldest is dropped) and kMaxStrangers remembered unknown handles.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "detrace/tracer/comm_registry.h"

namespace detrace::tracer {

class LateComms {
 public:
  static constexpr size_t kMaxExpected = 256;
  static constexpr size_t kMaxStrangers = 256;

  // Reads the handle in `slot`; nullopt if the memory cannot be read.
  using SlotReader = std::optional<const void*> (*)(const void* const* slot);
  // The default reader: process_vm_readv on this process (a pipe where that is refused).
  static std::optional<const void*> readSlot(const void* const* slot) noexcept;

  explicit LateComms(SlotReader reader = &readSlot) : reader_(reader) {}

  // NCCL will write the communicator known by `info` into `slot` later. An older expectation on
  // the same slot is dropped: the slot can hold only the newer handle now.
  void expect(const void* const* slot, const CommInfo& info);
  // Whether any slot is still expected: the cheap check before claim().
  bool anyExpected() const noexcept { return expected_count_.load(std::memory_order_acquire) > 0; }

  enum class Outcome {
    kFollowed,  // `comm` is the handle an expected slot holds: `info` is what it is known by
    kStranger,  // no slot holds it: first time this handle is seen
    kSeen,      // no slot holds it, as when it was first seen
  };
  struct Claim {
    Outcome outcome;
    CommInfo info;
  };
  // `comm`, unknown to the registry, is being used: the expectation whose slot holds it.
  Claim claim(const void* comm);
  // `comm` was destroyed: NCCL may hand its address out again, to a communicator that is followed.
  void forget(const void* comm);

 private:
  struct Expected {
    const void* const* slot;
    CommInfo info;
  };
  SlotReader reader_;
  mutable std::mutex mu_;
  std::vector<Expected> expected_;
  std::vector<const void*> strangers_;
  std::atomic<size_t> expected_count_{0};
};

}  // namespace detrace::tracer
