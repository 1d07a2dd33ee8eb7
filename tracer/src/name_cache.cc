// See name_cache.h.
#include "detrace/tracer/name_cache.h"

#include <array>
#include <cstring>
#include <memory>
#include <new>

#include "detrace/tracer/lasting_thread_local.h"

namespace detrace::tracer {
namespace {

struct LocalEntry {
  uint64_t owner = 0;
  const char* ptr = nullptr;
  std::string text;
  int64_t id = 0;
};

constexpr size_t kLocalEntries = 512;  // direct-mapped, per thread

size_t slotOf(const char* p) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 3) * 0x9E3779B97F4A7C15ull >> 55) %
         kLocalEntries;
}

struct HandleEntry {
  uint64_t owner = 0;
  uint64_t generation = 0;
  const void* handle = nullptr;
  int64_t id = 0;
};

constexpr size_t kHandleEntries = 256;  // direct-mapped, per thread

// A thread's caches (36 KiB): on the heap, made at its first lookup and freed with the thread,
// not in static TLS, which every thread of the program pays for from its stack (a thread made
// with a small stack could not start). Where they cannot be allocated, lookups go to the shared
// map.
struct ThreadCaches {
  std::array<LocalEntry, kLocalEntries> local;
  std::array<HandleEntry, kHandleEntries> handles;
};
ThreadCaches* threadCaches() noexcept {
  struct Tag;
  std::unique_ptr<ThreadCaches>& caches = lastingThreadLocal<std::unique_ptr<ThreadCaches>, Tag>();
  if (!caches) caches.reset(new (std::nothrow) ThreadCaches);
  return caches.get();
}
thread_local uint64_t t_hits = 0;

size_t handleSlot(const void* h) {  // the top 8 bits of a multiplicative hash of every bit
  static_assert(kHandleEntries == 256);
  return static_cast<size_t>(reinterpret_cast<uintptr_t>(h) * 0x9E3779B97F4A7C15ull >> 56);
}

}  // namespace

std::atomic<uint64_t> NameCache::next_owner_{0};
std::atomic<uint64_t> NameCache::handle_generation_{1};

void NameCache::forgetHandles() { handle_generation_.fetch_add(1, std::memory_order_release); }

int64_t NameCache::lookupByHandle(const void* handle, const char* mangled, const Intern& intern) {
  if (handle == nullptr) return lookup(mangled, intern);
  const uint64_t generation = handle_generation_.load(std::memory_order_acquire);
  ThreadCaches* caches = threadCaches();
  if (caches == nullptr) return lookup(mangled, intern);
  HandleEntry& e = caches->handles[handleSlot(handle)];
  if (e.owner == owner_ && e.handle == handle && e.generation == generation) {
    ++t_hits;
    return e.id;
  }
  const int64_t id = lookup(mangled, intern);
  e = {owner_, generation, handle, id};
  return id;
}

uint64_t NameCache::localHits() { return t_hits; }

int64_t NameCache::lookup(const char* mangled, const Intern& intern) {
  ThreadCaches* caches = threadCaches();
  if (caches == nullptr) return lookupShared(mangled, intern);  // no cache on this thread
  LocalEntry& e = caches->local[slotOf(mangled)];
  if (e.owner == owner_ && e.ptr == mangled && std::strcmp(e.text.c_str(), mangled) == 0) {
    ++t_hits;
    return e.id;
  }
  std::string text(mangled);
  const int64_t id = lookupShared(text, intern);
  e.owner = owner_;
  e.ptr = mangled;
  e.text = std::move(text);
  e.id = id;
  return id;
}

int64_t NameCache::lookupShared(const std::string& text, const Intern& intern) {
  {
    std::lock_guard lk(mu_);
    if (auto it = shared_.find(text); it != shared_.end()) return it->second;
  }
  const int64_t id = intern(text.c_str());
  std::lock_guard lk(mu_);
  if (shared_.size() < max_shared_) shared_.emplace(text, id);
  return id;
}

}  // namespace detrace::tracer
