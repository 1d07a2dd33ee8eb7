// AllocationMap: the traced process's device allocations by address range, so that a deep-window
// launch can tell which of its parameter words point into device memory and how far that memory
// extends (launch_params.h). The CUPTI resource/memory callbacks add and remove entries; the launch
// callbacks look addresses up. Plain C++ (no CUDA), CPU-tested.
//
// Inside the traced process: bounded (max_entries, refusals counted, never an exception out of a
// public method), readers share a lock so concurrent launches on several threads do not serialise.
// Entries never overlap: adding a range replaces whatever overlapped it (the driver reused the
// addresses, so the old entries are stale).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>

namespace detrace::tracer {

// How the memory was obtained. kMapped: cuMemMap pieces (virtual memory management API).
enum class AllocKind : uint8_t { kMalloc = 1, kAsync = 2, kMapped = 3, kIpc = 4, kManaged = 5, kOther = 6 };
// "malloc", "async", "mapped", "ipc", "managed", "other".
const char* allocKindName(AllocKind k);

struct Allocation {
  uint64_t base = 0;
  uint64_t size = 0;
  AllocKind kind = AllocKind::kOther;

  bool operator==(const Allocation&) const = default;
};

// Thread-safety: every method may be called from any thread; find()/size() take a shared lock,
// the mutators an exclusive one.
class AllocationMap {
 public:
  explicit AllocationMap(size_t max_entries = size_t{1} << 20);

  // Adds [base, base+size). Entries overlapping it are removed first (the range was reused).
  // False, and refused() grows, if size == 0, the range wraps past 2^64, or the map is full.
  bool add(uint64_t base, uint64_t size, AllocKind kind);
  // A free: removes the allocation that starts at `base`; false if none does.
  bool remove(uint64_t base);
  // An unmap of [base, base+size): removes the entries inside it and trims those that straddle its
  // ends (one that covers it on both sides is split in two; if the map is full the upper part is
  // dropped and counted in refused()).
  void removeRange(uint64_t base, uint64_t size);
  // The allocation containing `addr`, or nullopt. A kMapped piece is merged with the kMapped pieces
  // exactly contiguous with it (PyTorch's expandable segments map one reserved range chunk by
  // chunk, and a tensor may span chunks): pieces are taken alternately before and after, whole,
  // while the total stays within `max_merged`. A single piece larger than max_merged is returned
  // alone. O(log n) plus one step per merged piece.
  std::optional<Allocation> find(uint64_t addr, uint64_t max_merged = uint64_t{1} << 34) const;

  size_t size() const;
  // Allocations not recorded (full map, empty or wrapping range) since construction.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  // Forgets every allocation; refused() is kept.
  void clear();

 private:
  struct Entry {
    uint64_t size;
    AllocKind kind;
  };
  using Map = std::map<uint64_t, Entry>;  // by base; entries never overlap

  Allocation mergeMapped(Map::const_iterator piece, uint64_t max_merged) const;
  // Adds [base, end) as the upper half of a split entry (mu_ held); counted in refused_ if full.
  void splitOffUpper(uint64_t base, uint64_t end, AllocKind kind);

  const size_t max_entries_;
  mutable std::shared_mutex mu_;
  Map entries_;
  std::atomic<int64_t> refused_{0};
};

}  // namespace detrace::tracer
