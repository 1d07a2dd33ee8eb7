// ReorderBuffer: see the design block in reorder_buffer.h.
#include "detrace/tracer/reorder_buffer.h"

#include <algorithm>

namespace detrace::tracer {

ReorderBuffer::ReorderBuffer(EventSink& sink, ReorderOptions options)
    : sink_(sink),
      options_(options),
      seq_ring_(kRing, {0, db::kUnset}),
      written_incomplete_(kRing, 0) {}

uint64_t ReorderBuffer::pushLocked(Slot slot) {
  if (pending_.size() >= std::max<size_t>(options_.capacity, 1)) {
    writeHeadLocked(Reason::kOverflow);
  }
  slot.token = next_token_++;
  for (uint64_t id : slot.correlation_ids) {
    if (id != 0) by_correlation_[id] = slot.token;
  }
  pending_.push_back(std::move(slot));
  return pending_.back().token;
}

ReorderBuffer::Slot* ReorderBuffer::findLocked(uint64_t token) {
  if (pending_.empty() || token < pending_.front().token) return nullptr;
  uint64_t index = token - pending_.front().token;
  return index < pending_.size() ? &pending_[index] : nullptr;
}

uint64_t ReorderBuffer::addLaunch(const ApiLaunch& launch, uint64_t parent) {
  std::lock_guard lk(mu_);
  ++stats_.launches;
  Slot slot;
  slot.parent = parent;
  slot.correlation_ids[0] = launch.correlation_id;
  slot.launch = launch;
  if (launch.is_graph && slot.launch.expected_activities < 0) {
    auto it = graph_records_.find(launch.graph_key);
    if (it != graph_records_.end()) slot.launch.expected_activities = it->second;
  }
  uint64_t token = pushLocked(std::move(slot));
  return token;
}

void ReorderBuffer::addAlias(uint64_t token, uint64_t correlation_id) {
  std::lock_guard lk(mu_);
  Slot* slot = findLocked(token);
  if (slot == nullptr || correlation_id == 0 || slot->correlation_ids[1] != 0) return;
  slot->correlation_ids[1] = correlation_id;
  by_correlation_[correlation_id] = token;
}

void ReorderBuffer::launchFailed(uint64_t token) {
  std::lock_guard lk(mu_);
  Slot* slot = findLocked(token);
  if (slot == nullptr) return;
  ++stats_.failed_launches;
  slot->state = State::kComplete;
  drainLocked();
}

uint64_t ReorderBuffer::addLibraryOp(const LibraryOp& op, uint64_t parent, bool complete) {
  std::lock_guard lk(mu_);
  ++stats_.library_ops;
  Slot slot;
  slot.is_library = true;
  slot.parent = parent;
  slot.state = complete ? State::kComplete : State::kPending;
  slot.launch.cpu_ns = op.event.cpu_ns;  // for the timeout of an incomplete op
  slot.op = op;
  uint64_t token = pushLocked(std::move(slot));
  drainLocked();
  return token;
}

bool ReorderBuffer::completeLibraryOp(uint64_t token, const std::function<void(LibraryOp&)>& update) {
  std::lock_guard lk(mu_);
  Slot* slot = findLocked(token);
  if (slot == nullptr || !slot->is_library || !slot->op) return false;
  if (update) update(*slot->op);
  slot->state = State::kComplete;
  drainLocked();
  return true;
}

void ReorderBuffer::ignoreCorrelation(uint64_t correlation_id) {
  constexpr size_t kMaxIgnored = 1 << 16;
  std::lock_guard lk(mu_);
  if (!ignored_.insert(correlation_id).second) return;
  ignored_order_.push_back(correlation_id);
  if (ignored_order_.size() > kMaxIgnored) {
    ignored_.erase(ignored_order_.front());
    ignored_order_.pop_front();
  }
}

void ReorderBuffer::addActivity(const Activity& activity) {
  std::lock_guard lk(mu_);
  ++stats_.activities;
  if (activity.kind != db::EventKind::kKernel && !ignored_.empty() &&
      ignored_.erase(activity.correlation_id) > 0) {
    ++stats_.own_records;
    return;
  }
  auto it = by_correlation_.find(activity.correlation_id);
  Slot* slot = it == by_correlation_.end() ? nullptr : findLocked(it->second);
  if (slot != nullptr && !slot->is_library && !slot->launch.is_graph &&
      slot->launch.kind == db::EventKind::kKernel && activity.kind != db::EventKind::kKernel) {
    ++stats_.own_records;  // issued inside the launch's callback: the tracer's, not the program's
    return;
  }
  if (slot == nullptr) {
    bool late = activity.correlation_id != 0 &&
                std::find(written_incomplete_.begin(), written_incomplete_.end(),
                          activity.correlation_id) != written_incomplete_.end();
    if (late) {
      ++stats_.late;
      return;
    }
    // No API slot: write it now, in arrival order (unless a window skipped its launch).
    ++stats_.unmatched;
    if (options_.drop_unmatched) return;
    Slot orphan;
    orphan.launch.correlation_id = activity.correlation_id;
    orphan.launch.kind = activity.kind;
    orphan.records.push_back(activity);
    writeSlotLocked(orphan);
    return;
  }
  ++stats_.matched;
  if (slot->launch.is_graph) {
    if (slot->records.size() < options_.max_group_records) {
      slot->records.push_back(activity);
    } else {
      ++stats_.group_records_dropped;
    }
    int32_t expected = slot->launch.expected_activities;
    if (expected >= 0 && slot->records.size() >= static_cast<size_t>(expected)) {
      slot->state = State::kComplete;
    }
  } else {
    slot->records.assign(1, activity);
    slot->state = State::kComplete;
  }
  drainLocked();
}

void ReorderBuffer::poll(int64_t now_ns) {
  std::lock_guard lk(mu_);
  drainLocked();
  while (!pending_.empty() && pending_.front().launch.cpu_ns != db::kUnset &&
         now_ns - pending_.front().launch.cpu_ns > options_.timeout_ns) {
    writeHeadLocked(Reason::kTimeout);
    drainLocked();
  }
}

void ReorderBuffer::flush() {
  std::lock_guard lk(mu_);
  while (!pending_.empty()) writeHeadLocked(Reason::kFlush);
}

void ReorderBuffer::drainLocked() {
  while (!pending_.empty() && pending_.front().state == State::kComplete) {
    writeHeadLocked(Reason::kComplete);
  }
}

void ReorderBuffer::writeHeadLocked(Reason reason) {
  Slot& head = pending_.front();
  if (head.state != State::kComplete) {
    if (reason == Reason::kTimeout) ++stats_.timed_out;
    if (reason == Reason::kFlush) ++stats_.flushed_incomplete;
    if (reason == Reason::kOverflow) ++stats_.overflowed;
    // A graph whose record count was unknown: remember what arrived for its next launch.
    if (head.launch.is_graph && head.launch.expected_activities < 0 && !head.records.empty() &&
        graph_records_.size() < options_.max_remembered_graphs) {
      graph_records_.emplace(head.launch.graph_key, static_cast<int32_t>(head.records.size()));
    }
    for (uint64_t id : head.correlation_ids) {
      if (id == 0) continue;
      written_incomplete_[written_incomplete_next_] = id;
      written_incomplete_next_ = (written_incomplete_next_ + 1) % written_incomplete_.size();
    }
  }
  forgetCorrelationsLocked(head);
  Slot slot = std::move(head);
  pending_.pop_front();
  writeSlotLocked(slot);
}

void ReorderBuffer::forgetCorrelationsLocked(const Slot& slot) {
  for (uint64_t id : slot.correlation_ids) {
    auto it = by_correlation_.find(id);
    if (id != 0 && it != by_correlation_.end() && it->second == slot.token) by_correlation_.erase(it);
  }
}

db::Event ReorderBuffer::baseEventLocked(const Slot& slot) const {
  db::Event e;
  e.kind = slot.launch.kind;
  e.name = slot.launch.name;
  e.stream = slot.launch.stream;
  e.device = slot.launch.device;
  e.cpu_ns = slot.launch.cpu_ns;
  e.correlation_id = slot.launch.correlation_id == 0 ? db::kUnset
                                                     : static_cast<int64_t>(slot.launch.correlation_id);
  if (slot.parent != 0) {
    auto seq = seqOfLocked(slot.parent);
    if (seq) e.parent_seq = *seq;
  }
  if (e.kind == db::EventKind::kKernel) {
    e.has_launch = true;
    e.launch.api = slot.launch.api;
  }
  return e;
}

// Fills what the activity record knows into an event made from the API slot.
static void applyActivity(db::Event& e, const Activity& a) {
  e.kind = a.kind;
  if (a.name != db::kUnset) e.name = a.name;
  if (e.stream == db::kUnset) e.stream = a.stream;  // the API's stream wins when known
  if (a.device >= 0) e.device = a.device;
  e.gpu_start_ns = a.gpu_start_ns;
  e.gpu_end_ns = a.gpu_end_ns;
  e.graph_id = a.graph_id;
  e.graph_node_id = a.graph_node_id;
  if (a.has_launch) {
    db::LaunchApi api = e.launch.api;
    e.has_launch = true;
    e.launch = a.launch;
    if (api != db::LaunchApi::kUnknown) e.launch.api = api;
  } else if (a.kind != db::EventKind::kKernel) {
    e.has_launch = false;
    e.launch = {};
  }
}

void ReorderBuffer::writeSlotLocked(Slot& slot) {
  auto count = [this](std::optional<int64_t> seq) {
    if (!seq) ++stats_.sink_dropped;
    return seq;
  };
  if (slot.is_library) {
    db::Event e = slot.op->event;
    if (slot.parent != 0) {
      if (auto seq = seqOfLocked(slot.parent)) e.parent_seq = *seq;
    }
    std::optional<int64_t> seq;
    if (auto* c = std::get_if<db::Collective>(&slot.op->detail)) {
      seq = count(sink_.appendCollective(e, *c));
    } else if (auto* g = std::get_if<db::Gemm>(&slot.op->detail)) {
      seq = count(sink_.appendGemm(e, *g));
    } else {
      seq = count(sink_.appendMarker(e, std::get<db::Marker>(slot.op->detail)));
    }
    rememberSeqLocked(slot.token, seq);
    if (options_.on_written) options_.on_written(slot.token, seq.value_or(kSeqDropped));
    return;
  }
  db::Event base = baseEventLocked(slot);
  auto notify = [&](std::optional<int64_t> seq) {
    if (slot.launch.notify_written && options_.on_written)
      options_.on_written(slot.token, seq.value_or(kSeqDropped));
  };
  if (slot.records.empty()) {
    auto seq = count(sink_.append(base));
    rememberSeqLocked(slot.token, seq);
    notify(seq);
    return;
  }
  // Graph records in GPU order (node id breaks ties); a plain launch has one record.
  std::stable_sort(slot.records.begin(), slot.records.end(), [](const Activity& a, const Activity& b) {
    return a.gpu_start_ns != b.gpu_start_ns ? a.gpu_start_ns < b.gpu_start_ns
                                            : a.graph_node_id < b.graph_node_id;
  });
  std::optional<int64_t> first;
  for (const Activity& a : slot.records) {
    db::Event e = base;
    applyActivity(e, a);
    auto seq = count(sink_.append(e));
    if (!first) first = seq;
  }
  rememberSeqLocked(slot.token, first);
  notify(first);
}

void ReorderBuffer::rememberSeqLocked(uint64_t token, std::optional<int64_t> seq) {
  if (token == 0) return;
  seq_ring_[token % kRing] = {token, seq.value_or(db::kUnset)};
}

std::optional<int64_t> ReorderBuffer::seqOfLocked(uint64_t token) const {
  const auto& [t, seq] = seq_ring_[token % kRing];
  if (t != token || seq == db::kUnset) return std::nullopt;
  return seq;
}

void ReorderBuffer::setDropUnmatched(bool on) {
  std::lock_guard lk(mu_);
  options_.drop_unmatched = on;
}

std::optional<int64_t> ReorderBuffer::seqOf(uint64_t token) const {
  std::lock_guard lk(mu_);
  return seqOfLocked(token);
}

ReorderStats ReorderBuffer::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

size_t ReorderBuffer::pending() const {
  std::lock_guard lk(mu_);
  return pending_.size();
}

}  // namespace detrace::tracer
