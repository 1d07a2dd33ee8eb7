// NameCache: the interned string id of a kernel's name, looked up on every launch and every kernel
// record, so it must cost almost nothing on the launching thread. CUPTI hands out the same name
// pointer for every launch of a function; a small thread-local table keyed by that pointer answers
// without a lock or an allocation, after checking the text (a pointer may be reused for another
// name once a module is unloaded). Misses go to a shared map under a mutex, and only then to
// `intern` (demangling and the writer's string table). Plain C++, CPU-tested and benchmarked
// (bench/tracer/bench_tracer_bookkeeping).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

namespace detrace::tracer {

class NameCache {
 public:
  // Computes the id of a name seen for the first time (demangle + intern); called without locks
  // held by the cache, at most once per distinct name text as long as the shared map has room.
  using Intern = std::function<int64_t(const char* mangled)>;

  explicit NameCache(size_t max_shared = 65536) : max_shared_(max_shared) {}

  int64_t lookup(const char* mangled, const Intern& intern);

  // The same, remembered per thread by the launched function's handle (the host function pointer
  // a runtime launch passes, or the driver's CUfunction; null: lookup() alone): a repeat launch
  // reads none of the name's text, which for a templated kernel is hundreds of bytes. A handle
  // names one function while its module is loaded; forgetHandles() (a module unload) drops every
  // thread's answers.
  int64_t lookupByHandle(const void* handle, const char* mangled, const Intern& intern);
  static void forgetHandles();

  // Lookups answered by the thread-local table (for tests and benchmarks).
  static uint64_t localHits();

 private:
  // The shared map's id for `text` (interned and added on its first lookup).
  int64_t lookupShared(const std::string& text, const Intern& intern);
  std::mutex mu_;
  std::unordered_map<std::string, int64_t> shared_;
  size_t max_shared_;
  static std::atomic<uint64_t> next_owner_;
  static std::atomic<uint64_t> handle_generation_;
  const uint64_t owner_ = next_owner_.fetch_add(1) + 1;  // tags this cache's thread-local entries
};

}  // namespace detrace::tracer
