// See name_cache.h.
#include "detrace/tracer/name_cache.h"

#include <array>
#include <cstring>

namespace detrace::tracer {
namespace {

struct LocalEntry {
  uint64_t owner = 0;
  const char* ptr = nullptr;
  std::string text;
  int64_t id = 0;
};

constexpr size_t kLocalEntries = 512;  // direct-mapped, per thread

thread_local std::array<LocalEntry, kLocalEntries> t_entries;
thread_local uint64_t t_hits = 0;

size_t slotOf(const char* p) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 3) * 0x9E3779B97F4A7C15ull >> 55) %
         kLocalEntries;
}

}  // namespace

std::atomic<uint64_t> NameCache::next_owner_{0};

uint64_t NameCache::localHits() { return t_hits; }

int64_t NameCache::lookup(const char* mangled, const Intern& intern) {
  LocalEntry& e = t_entries[slotOf(mangled)];
  if (e.owner == owner_ && e.ptr == mangled && std::strcmp(e.text.c_str(), mangled) == 0) {
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
  e.ptr = mangled;
  e.text = std::move(text);
  e.id = id;
  return id;
}

}  // namespace detrace::tracer
