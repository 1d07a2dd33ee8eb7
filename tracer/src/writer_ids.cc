// Per-thread caches of writer ids: see writer_ids.h.
#include "writer_ids.h"

#include <array>

namespace detrace::tracer {
namespace {

// A handful of entries, replaced round-robin: a thread uses few streams and few constant strings.
template <typename Key, size_t N>
struct IdCache {
  struct Entry {
    const db::TraceWriter* writer = nullptr;
    Key key{};
    int32_t device = 0;
    int64_t id = 0;
  };
  std::array<Entry, N> entries{};
  unsigned next = 0;

  const Entry* find(const db::TraceWriter& w, Key key, int32_t device) const {
    for (const Entry& e : entries) {
      if (e.writer == &w && e.key == key && e.device == device) return &e;
    }
    return nullptr;
  }
  void put(const db::TraceWriter& w, Key key, int32_t device, int64_t id) {
    entries[next++ % N] = {&w, key, device, id};
  }
};

thread_local IdCache<int64_t, 8> t_streams;
thread_local IdCache<const char*, 16> t_constants;

}  // namespace

int64_t cachedStreamId(db::TraceWriter& w, int64_t handle, int32_t device) {
  if (const auto* e = t_streams.find(w, handle, device)) return e->id;
  const int64_t id = w.stream(handle, device);
  t_streams.put(w, handle, device, id);
  return id;
}

int64_t cachedConstantId(db::TraceWriter& w, const char* text) {
  if (const auto* e = t_constants.find(w, text, 0)) return e->id;
  const int64_t id = w.intern(text);
  t_constants.put(w, text, 0, id);
  return id;
}

void resetWriterIdCaches() {
  t_streams = {};
  t_constants = {};
}

}  // namespace detrace::tracer
