// See allocation_map.h. std::map keyed by base with non-overlapping entries: since the entries are
// disjoint, their ends are sorted like their bases, so one upper_bound finds both the entry
// containing an address and the first entry a range touches. Allocation failures inside the map
// are caught and counted as refusals: this code runs in CUPTI callbacks, where nothing may throw.
#include "detrace/tracer/allocation_map.h"

#include <iterator>
#include <mutex>
#include <new>

namespace detrace::tracer {
namespace {

// The first entry that ends after `addr`: the one containing it, if any. `entries` is a map of
// disjoint [base, base+size) by base (const or not).
template <typename Entries>
auto firstEndingAfter(Entries& entries, uint64_t addr) {
  auto it = entries.upper_bound(addr);
  if (it != entries.begin()) {
    auto prev = std::prev(it);
    if (addr - prev->first < prev->second.size) return prev;
  }
  return it;
}

}  // namespace

const char* allocKindName(AllocKind k) {
  switch (k) {
    case AllocKind::kMalloc: return "malloc";
    case AllocKind::kAsync: return "async";
    case AllocKind::kMapped: return "mapped";
    case AllocKind::kIpc: return "ipc";
    case AllocKind::kManaged: return "managed";
    case AllocKind::kOther: return "other";
  }
  return "other";
}

AllocationMap::AllocationMap(size_t max_entries) : max_entries_(max_entries) {}

bool AllocationMap::add(uint64_t base, uint64_t size, AllocKind kind) {
  if (size == 0 || base + size < base) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint64_t end = base + size;
  std::unique_lock lk(mu_);
  auto first = firstEndingAfter(entries_, base);
  auto last = first;
  size_t overlapping = 0;
  for (; last != entries_.end() && last->first < end; ++last) ++overlapping;
  // Refuse before touching anything, so a full map keeps its (maybe still valid) entries.
  if (entries_.size() - overlapping >= max_entries_) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  entries_.erase(first, last);
  try {
    entries_.emplace(base, Entry{size, kind});
  } catch (const std::bad_alloc&) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool AllocationMap::remove(uint64_t base) {
  std::unique_lock lk(mu_);
  return entries_.erase(base) > 0;
}

void AllocationMap::removeRange(uint64_t base, uint64_t size) {
  if (size == 0) return;
  const uint64_t end = base + size < base ? UINT64_MAX : base + size;  // saturate
  std::unique_lock lk(mu_);
  auto it = firstEndingAfter(entries_, base);
  while (it != entries_.end() && it->first < end) {
    const uint64_t e_base = it->first, e_end = it->first + it->second.size;
    if (e_base < base) {
      it->second.size = base - e_base;  // keep the part below the range
      if (e_end > end) splitOffUpper(end, e_end, it->second.kind);
      ++it;
    } else if (e_end > end) {
      // Keep the part above the range: re-key the node (no allocation).
      auto node = entries_.extract(it++);
      node.key() = end;
      node.mapped().size = e_end - end;
      entries_.insert(it, std::move(node));
    } else {
      it = entries_.erase(it);
    }
  }
}

void AllocationMap::splitOffUpper(uint64_t base, uint64_t end, AllocKind kind) {
  if (entries_.size() >= max_entries_) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  try {
    entries_.emplace(base, Entry{end - base, kind});
  } catch (const std::bad_alloc&) {
    refused_.fetch_add(1, std::memory_order_relaxed);
  }
}

Allocation AllocationMap::mergeMapped(Map::const_iterator piece, uint64_t max_merged) const {
  Allocation a{piece->first, piece->second.size, AllocKind::kMapped};
  auto lo = piece, hi = std::next(piece);  // merged pieces: [lo, hi)
  for (bool grew = true; grew;) {
    grew = false;
    if (lo != entries_.begin()) {
      auto prev = std::prev(lo);
      if (prev->second.kind == AllocKind::kMapped && prev->first + prev->second.size == a.base &&
          prev->second.size <= max_merged - a.size) {
        a.base = prev->first;
        a.size += prev->second.size;
        lo = prev;
        grew = true;
      }
    }
    if (hi != entries_.end() && hi->second.kind == AllocKind::kMapped &&
        hi->first == a.base + a.size && hi->second.size <= max_merged - a.size) {
      a.size += hi->second.size;
      ++hi;
      grew = true;
    }
  }
  return a;
}

std::optional<Allocation> AllocationMap::find(uint64_t addr, uint64_t max_merged) const {
  std::shared_lock lk(mu_);
  auto it = firstEndingAfter(entries_, addr);
  if (it == entries_.end() || it->first > addr) return std::nullopt;
  if (it->second.kind == AllocKind::kMapped && it->second.size < max_merged) {
    return mergeMapped(it, max_merged);
  }
  return Allocation{it->first, it->second.size, it->second.kind};
}

size_t AllocationMap::size() const {
  std::shared_lock lk(mu_);
  return entries_.size();
}

void AllocationMap::clear() {
  std::unique_lock lk(mu_);
  entries_.clear();
}

}  // namespace detrace::tracer
