#include "detrace/tracer/graph_record_counts.h"

namespace detrace::tracer {

void GraphRecordCounts::instantiated(uint64_t exec, int32_t records) {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  if (it == by_exec_.end()) {
    if (by_exec_.size() >= max_graphs_) return;
    it = by_exec_.emplace(exec, Entry{}).first;
  }
  remembered_ -= it->second.nodes.size();
  Entry& e = it->second;
  e = Entry{};
  e.records = e.base = records;
  e.generation = ++generations_;
}

bool GraphRecordCounts::nodeEnabled(uint64_t exec, bool gives_record, bool was_known, bool was, bool now) {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  if (it == by_exec_.end()) return false;
  if (!gives_record) return true;
  Entry& e = it->second;
  ++e.changes;
  if (!was_known) {
    e.records = kRecordsVary;
    return true;
  }
  if (was == now) return true;
  e.disabled += now ? -1 : 1;
  if (e.records == kRecordsVary) return true;
  // Unknown: the count the ReorderBuffer learnt from a first launch no longer holds. A node
  // enabled that was never seen disabled (it was before the callbacks were on): the count taken
  // at instantiation was already too high. Neither leaves a count to wait for.
  if (e.records == kRecordsUnknown || e.disabled < 0) {
    e.records = kRecordsVary;
    return true;
  }
  e.records += now ? 1 : -1;
  return true;
}

void GraphRecordCounts::updated(uint64_t exec) {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  if (it != by_exec_.end() && it->second.disabled != 0) it->second.records = kRecordsVary;
}

void GraphRecordCounts::forget(uint64_t exec) {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  if (it == by_exec_.end()) return;
  remembered_ -= it->second.nodes.size();
  by_exec_.erase(it);
}

int32_t GraphRecordCounts::expected(uint64_t exec) const {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  return it == by_exec_.end() ? kRecordsUnknown : it->second.records;
}

bool GraphRecordCounts::following() const {
  std::lock_guard lk(mu_);
  return following_;
}

void GraphRecordCounts::rememberNodes(uint64_t exec, uint64_t graph, std::vector<uint64_t> nodes) {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  if (following_ || it == by_exec_.end() || nodes.empty()) return;
  if (remembered_ - it->second.nodes.size() + nodes.size() > kMaxRememberedNodes) return;
  remembered_ = remembered_ - it->second.nodes.size() + nodes.size();
  it->second.graph = graph;
  it->second.nodes = std::move(nodes);
}

void GraphRecordCounts::graphDestroyed(uint64_t graph) {
  std::lock_guard lk(mu_);
  if (following_ || remembered_ == 0) return;
  for (auto& [exec, e] : by_exec_) {
    if (e.graph != graph) continue;
    remembered_ -= e.nodes.size();
    e.nodes = {};
    e.graph = 0;
  }
}

void GraphRecordCounts::startFollowing(const std::function<int(uint64_t, uint64_t)>& state) {
  struct Kept {
    uint64_t exec, generation, changes;
    std::vector<uint64_t> nodes;
    int32_t disabled = 0;
  };
  std::vector<Kept> kept;
  {
    std::lock_guard lk(mu_);
    if (following_) return;
    following_ = true;
    for (auto& [exec, e] : by_exec_) {
      if (e.nodes.empty()) continue;
      kept.push_back(Kept{exec, e.generation, e.changes, std::move(e.nodes)});
      e.nodes = {};
      e.graph = 0;
    }
    remembered_ = 0;
  }
  // Read without the lock: the driver may hold its own while a graph is instantiated, whose
  // callback takes this lock (instantiated).
  for (Kept& k : kept) {
    for (uint64_t node : k.nodes) k.disabled += state(k.exec, node) == 1 ? 1 : 0;
  }
  std::lock_guard lk(mu_);
  for (const Kept& k : kept) {
    auto it = by_exec_.find(k.exec);
    if (it == by_exec_.end() || it->second.generation != k.generation) continue;  // gone since
    Entry& e = it->second;
    if (e.changes != k.changes) {
      e.records = kRecordsVary;  // a node changed state while they were read: no count is sure
      continue;
    }
    if (k.disabled == 0) continue;
    // Absolute: a change the callbacks saw before the reading is in what was read.
    e.disabled = k.disabled;
    if (e.base >= 0 && e.records != kRecordsVary) {
      e.records = e.base >= k.disabled ? e.base - k.disabled : kRecordsVary;
    }
  }
}

}  // namespace detrace::tracer
