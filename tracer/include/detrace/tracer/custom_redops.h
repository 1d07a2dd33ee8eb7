// CustomRedOps: the reduction operators a program made with ncclRedOpCreatePreMulSum (NCCL's only
// kind of custom operator), so that a collective using one is recorded as a PreMulSum with its
// scalar rather than as a bare operator number.
//
// NCCL hands out a custom operator's number per communicator (an index from ncclNumOps up, mixed
// with a hash of the communicator's address, so the numbers differ from run to run) and gives a
// destroyed one's number out again: an operator is known by (communicator, number) as the program
// passes it, forgotten when destroyed, and all of a communicator's are forgotten with it (NCCL
// may give its address to a new one).
//
// Thread-safety: every method may be called from any thread. Bounded: kMaxOps operators; later
// ones are not remembered (their collectives are recorded as unknown custom operators).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace detrace::tracer {

class CustomRedOps {
 public:
  static constexpr size_t kMaxOps = 4096;

  struct PreMulSum {
    int32_t datatype = -1;  // the ncclDataType_t it was made for (NCCL refuses it with any other)
    bool host = false;      // ncclScalarHostImmediate: NCCL read the scalar at creation...
    uint64_t scalar = 0;    // ...these bytes, little-endian, zero-extended to 64 bits
    // (ncclScalarDevice: NCCL reads the scalar from device memory at each call; the tracer does
    // not, on the program's thread, so nothing of it is kept.)
  };

  // A scalar's first `bytes` bytes (at most 8) as PreMulSum::scalar keeps them.
  static uint64_t packScalar(const void* scalar, size_t bytes);

  // Remembers operator `op` of `comm` (replacing a destroyed one's number); false if full.
  bool add(const void* comm, int32_t op, const PreMulSum& info);
  void remove(const void* comm, int32_t op);
  // Forgets every operator of a destroyed or aborted communicator.
  void removeComm(const void* comm);
  std::optional<PreMulSum> find(const void* comm, int32_t op) const;
  size_t size() const;

 private:
  using Key = std::pair<const void*, int32_t>;
  mutable std::mutex mu_;
  std::map<Key, PreMulSum> ops_;
};

}  // namespace detrace::tracer
