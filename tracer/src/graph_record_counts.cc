#include "detrace/tracer/graph_record_counts.h"

namespace detrace::tracer {

void GraphRecordCounts::instantiated(uint64_t exec, int32_t records) {
  std::lock_guard lk(mu_);
  if (by_exec_.size() >= max_graphs_ && by_exec_.count(exec) == 0) return;
  by_exec_[exec] = Entry{records, 0};
}

bool GraphRecordCounts::nodeEnabled(uint64_t exec, bool gives_record, bool was_known, bool was, bool now) {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  if (it == by_exec_.end()) return false;
  if (!gives_record) return true;
  Entry& e = it->second;
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
  by_exec_.erase(exec);
}

int32_t GraphRecordCounts::expected(uint64_t exec) const {
  std::lock_guard lk(mu_);
  auto it = by_exec_.find(exec);
  return it == by_exec_.end() ? kRecordsUnknown : it->second.records;
}

}  // namespace detrace::tracer
