// A map of at most `capacity` entries that forgets the least recently used one to make room: the
// tracer's caches of per-problem answers (cuBLASLt's heuristic algorithm per GEMM problem), which
// a serving engine's ever-changing token counts would otherwise fill once and then bypass for
// good. Not thread-safe (its user locks). Plain logic over standard types, so that CPU tests can
// check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <utility>

namespace detrace::tracer {

template <typename K, typename V, typename Compare = std::less<K>>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value for `key`, now the most recently used; nullptr if absent.
  const V* find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.pos);
    return &it->second.value;
  }

  // Sets `key` to `value` as the most recently used, forgetting the least recently used entry
  // when full.
  void put(const K& key, const V& value) {
    if (auto it = index_.find(key); it != index_.end()) {
      it->second.value = value;
      order_.splice(order_.begin(), order_, it->second.pos);
      return;
    }
    if (index_.size() >= capacity_) {
      index_.erase(index_.find(*order_.back()));  // by iterator: the key is the node's own
      order_.pop_back();
      ++evicted_;
    }
    order_.push_front(nullptr);  // first: if the map's insertion throws, nothing points anywhere
    try {
      auto it = index_.emplace(key, Entry{value, order_.begin()}).first;
      order_.front() = &it->first;  // a map's keys stay where they are
    } catch (...) {
      order_.pop_front();
      throw;
    }
  }

  size_t size() const { return index_.size(); }
  int64_t evicted() const { return evicted_; }

 private:
  struct Entry {
    V value;
    typename std::list<const K*>::iterator pos;
  };
  size_t capacity_;
  std::map<K, Entry, Compare> index_;
  std::list<const K*> order_;  // most recently used first
  int64_t evicted_ = 0;
};

}  // namespace detrace::tracer
