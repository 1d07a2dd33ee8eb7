// See name_cache.h.
#include "detrace/tracer/name_cache.h"

#include <array>
#include <cstring>

#include <xxhash.h>

namespace detrace::tracer {
namespace {

struct LocalEntry {
  uint64_t owner = 0;
  std::string text;
  int64_t id = 0;
};

constexpr size_t kLocalEntries = 512;  // direct-mapped, per thread

thread_local std::array<LocalEntry, kLocalEntries> t_entries;
thread_local uint64_t t_hits = 0;

// By the name's text, not its address: CUPTI may hand every launch's name over in the same buffer,
// which would put every kernel in one slot (measured on the H200: 300 ns per launch in a decode
// loop of ~50 kernels, against 80 ns for a loop of one).
size_t slotOf(const char* p, size_t len) {
  return static_cast<size_t>(XXH3_64bits(p, len) % kLocalEntries);
}

}  // namespace

std::atomic<uint64_t> NameCache::next_owner_{0};

uint64_t NameCache::localHits() { return t_hits; }

int64_t NameCache::lookup(const char* mangled, const Intern& intern) {
  const size_t len = std::strlen(mangled);
  LocalEntry& e = t_entries[slotOf(mangled, len)];
  if (e.owner == owner_ && e.text.size() == len && std::memcmp(e.text.data(), mangled, len) == 0) {
    ++t_hits;
    return e.id;
  }
  std::string text(mangled);
  int64_t id = 0;
  bool found = false;
  {
    std::lock_guard lk(mu_);
    if (auto it = shared_.find(text); it != shared_.end()) {
      id = it->second;
      found = true;
    }
  }
  if (!found) {
    id = intern(mangled);
    std::lock_guard lk(mu_);
    if (shared_.size() < max_shared_) shared_.emplace(text, id);
  }
  e.owner = owner_;
  e.text = std::move(text);
  e.id = id;
  return id;
}

}  // namespace detrace::tracer
