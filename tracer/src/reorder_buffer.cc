// ReorderBuffer: see the design block in reorder_buffer.h.
#include "detrace/tracer/reorder_buffer.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace detrace::tracer {

namespace {
size_t roundUpPow2(size_t n) {
  size_t p = 2;
  while (p < n && p < (size_t{1} << 24)) p <<= 1;
  return p;
}
}  // namespace

ReorderBuffer::ReorderBuffer(EventSink& sink, ReorderOptions options)
    : sink_(sink),
      options_(options),
      seq_ring_(kRing, {0, db::kUnset}),
      max_incomplete_(std::max(kRing, options.capacity)) {
  const size_t cells = roundUpPow2(options_.ingress_cells);
  cells_ = std::make_unique<Cell[]>(cells);
  cell_mask_ = cells - 1;
  // Tickets start at 1: cell i is first free for ticket i (cell 0 for ticket `cells`).
  for (size_t i = 0; i < cells; ++i) cells_[i].seq.store(i == 0 ? cells : i, std::memory_order_relaxed);
}

// ---- the way in (program threads; no lock unless the ring is full) ----

ReorderBuffer::Cell& ReorderBuffer::claimCell(uint64_t ticket) {
  Cell& cell = cells_[ticket & cell_mask_];
  while (cell.seq.load(std::memory_order_acquire) != ticket) {
    // Full: the reader is a lap behind. Move what is published (the oldest cell first, which is
    // the one wanted), then wait for launching threads still writing older tickets.
    {
      std::lock_guard lk(mu_);
      ++stats_.ingress_full;
      drainIngressLocked(64);
    }
    if (cell.seq.load(std::memory_order_acquire) != ticket) std::this_thread::yield();
  }
  return cell;
}

void ReorderBuffer::publish(Cell& cell, uint64_t ticket) {
  cell.seq.store(ticket + 1, std::memory_order_release);
}

// A launch's cell, and a skip cell for each token its graph's replayed ops take after its own
// (tokens are then not dense). `launch` is the caller's copy: every allocation a cell needs is
// made before its ticket is taken, so a ticket once taken is always published (the reader cannot
// go past an unpublished one).
uint64_t ReorderBuffer::publishLaunch(ApiLaunch launch, uint64_t parent, uint64_t alias, bool failed) {
  const uint64_t extra = launch.graph_ops ? launch.graph_ops->size() : 0;
  const uint64_t token = next_ticket_.fetch_add(1 + extra, std::memory_order_relaxed);
  Cell& cell = claimCell(token);
  cell.what = Cell::What::kLaunch;
  cell.launch = std::move(launch);
  cell.parent = parent;
  cell.alias = alias;
  cell.failed = failed;
  publish(cell, token);
  for (uint64_t i = 1; i <= extra; ++i) {
    Cell& skip = claimCell(token + i);
    skip.what = Cell::What::kSkip;
    publish(skip, token + i);
  }
  return token;
}

uint64_t ReorderBuffer::addLaunch(const ApiLaunch& launch, uint64_t parent) {
  return publishLaunch(launch, parent, 0, false);
}

// in_flight_: the generation (bumped by resetInFlight) in the high 32 bits, the launches between
// launchEntering and their end in the low 32. A launch ends only its own generation's count.
uint32_t ReorderBuffer::launchEntering() {
  return static_cast<uint32_t>(in_flight_.fetch_add(1, std::memory_order_acq_rel) >> 32);
}

void ReorderBuffer::endInFlight(uint32_t generation) {
  uint64_t v = in_flight_.load(std::memory_order_relaxed);
  while ((v >> 32) == generation && (v & 0xffffffffu) != 0) {
    // Release: a reader that sees the count drop also sees the cell published before it.
    if (in_flight_.compare_exchange_weak(v, v - 1, std::memory_order_release, std::memory_order_relaxed)) {
      return;
    }
  }
}

void ReorderBuffer::resetInFlight() {
  uint64_t v = in_flight_.load(std::memory_order_relaxed);
  while (!in_flight_.compare_exchange_weak(v, ((v >> 32) + 1) << 32, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
  }
}

uint32_t ReorderBuffer::inFlightLocked() const {
  return static_cast<uint32_t>(in_flight_.load(std::memory_order_acquire) & 0xffffffffu);
}

void ReorderBuffer::launchAbandoned(uint32_t generation) { endInFlight(generation); }

uint64_t ReorderBuffer::addLaunchAtExit(ApiLaunch launch, uint64_t parent, uint64_t alias,
                                        bool failed, uint32_t generation) {
  const uint64_t token = publishLaunch(std::move(launch), parent, alias, failed);
  endInFlight(generation);  // after the publication
  return token;
}

uint64_t ReorderBuffer::addLibraryOp(const LibraryOp& op, uint64_t parent, bool complete) {
  return addLibraryOp(std::make_unique<LibraryOp>(op), parent, complete);
}

uint64_t ReorderBuffer::addLibraryOp(std::unique_ptr<LibraryOp> copy, uint64_t parent,
                                     bool complete) {
  const uint64_t token = next_ticket_.fetch_add(1, std::memory_order_relaxed);
  Cell& cell = claimCell(token);
  cell.what = Cell::What::kLibrary;
  cell.op = std::move(copy);
  cell.parent = parent;
  cell.complete = complete;
  publish(cell, token);
  // Like a launch, the op is moved into the FIFO and written by the side that takes GPU records
  // (addActivity, poll, flush): the calling thread takes no lock. (It used to drain here, which
  // made the program's thread move every launch published since the last op: most of the 2.8 us
  // a GEMM's recording took on the H200.)
  return token;
}

void ReorderBuffer::addWindowEdge(uint64_t op_token, uint64_t position, bool open, int64_t stream) {
  const uint64_t token = next_ticket_.fetch_add(1, std::memory_order_relaxed);
  Cell& cell = claimCell(token);
  cell.what = open ? Cell::What::kWindowOpen : Cell::What::kWindowClose;
  cell.parent = op_token;
  cell.alias = position;
  cell.launch.stream = stream;
  publish(cell, token);
}

// ---- the way through (under mu_) ----

void ReorderBuffer::drainIngressLocked(size_t max) {
  bool moved = false;
  for (size_t n = 0; n < max; ++n) {
    Cell& cell = cells_[consumed_ & cell_mask_];
    if (cell.seq.load(std::memory_order_acquire) != consumed_ + 1) break;
    takeCellLocked(cell, consumed_);
    cell.seq.store(consumed_ + cell_mask_ + 1, std::memory_order_release);
    ++consumed_;
    moved = true;
  }
  if (moved && !early_.empty()) resolveEarlyLocked(kNoTime);
}

void ReorderBuffer::takeCellLocked(Cell& cell, uint64_t token) {
  if (cell.what == Cell::What::kSkip) return;
  if (cell.what == Cell::What::kWindowOpen || cell.what == Cell::What::kWindowClose) {
    takeWindowEdgeLocked(cell);
    return;
  }
  Slot slot;
  slot.token = token;
  slot.parent = cell.parent;
  if (cell.what == Cell::What::kLibrary) {
    ++stats_.library_ops;
    slot.is_library = true;
    slot.state = cell.complete ? State::kComplete : State::kPending;
    slot.launch.cpu_ns = cell.op->event.cpu_ns;  // for the timeout of an incomplete op
    slot.op = std::move(*cell.op);
    cell.op.reset();
    pushLocked(std::move(slot));
    return;
  }
  ++stats_.launches;
  slot.launch = std::move(cell.launch);
  cell.launch = ApiLaunch{};
  slot.correlation_ids[0] = slot.launch.correlation_id;
  slot.correlation_ids[1] = cell.alias;
  if (slot.launch.is_graph && slot.launch.expected_activities == kRecordsUnknown) {
    auto it = graph_records_.find(slot.launch.graph_key);
    if (it != graph_records_.end()) slot.launch.expected_activities = it->second;
  }
  if (slot.launch.is_graph && slot.launch.expected_activities == kRecordsVary) {
    ++stats_.varying_graph_launches;
  }
  // A graph of no kernel, copy or memset node (host, event or empty graphs): no record will come.
  if (slot.launch.is_graph && slot.launch.expected_activities == 0) slot.state = State::kComplete;
  if (cell.failed) {
    ++stats_.failed_launches;
    slot.state = State::kComplete;
    slot.failed = true;
  }
  pushLocked(std::move(slot));
}

void ReorderBuffer::pushLocked(Slot slot) {
  if (pending_.size() >= std::max<size_t>(options_.capacity, 1)) {
    writeHeadLocked(Reason::kOverflow);
  }
  for (uint64_t id : slot.correlation_ids) {
    if (id != 0) by_correlation_[id] = slot.token;
  }
  if (options_.place_records) placeSlotLocked(slot);
  pending_.push_back(std::move(slot));
}

std::deque<ReorderBuffer::Slot>::iterator ReorderBuffer::findItLocked(uint64_t token) {
  if (pending_.empty() || token < pending_.front().token) return pending_.end();
  // Tokens increase along the FIFO; they are dense unless a graph launch replays library ops, or
  // placement wrote a slot from the middle.
  const uint64_t index = token - pending_.front().token;
  if (index < pending_.size() && pending_[index].token == token) {
    return pending_.begin() + static_cast<std::ptrdiff_t>(index);
  }
  auto it = std::lower_bound(pending_.begin(), pending_.end(), token,
                             [](const Slot& s, uint64_t t) { return s.token < t; });
  return it != pending_.end() && it->token == token ? it : pending_.end();
}

ReorderBuffer::Slot* ReorderBuffer::findLocked(uint64_t token) {
  auto it = findItLocked(token);
  return it == pending_.end() ? nullptr : &*it;
}

// The slot written next: the FIFO's head or, with placement, the first placed (by_place_'s top).
// Call only with pending_ not empty.
std::deque<ReorderBuffer::Slot>::iterator ReorderBuffer::nextLocked() {
  while (options_.place_records && !by_place_.empty()) {
    auto it = findItLocked(by_place_.front().second);
    if (it != pending_.end()) return it;
    // Not pending (never so: every pending slot has its entry): skipped all the same.
    std::pop_heap(by_place_.begin(), by_place_.end(), std::greater<>());
    by_place_.pop_back();
  }
  return pending_.begin();
}

void ReorderBuffer::addAlias(uint64_t token, uint64_t correlation_id) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  Slot* slot = findLocked(token);
  if (slot == nullptr || correlation_id == 0 || slot->correlation_ids[1] != 0) return;
  slot->correlation_ids[1] = correlation_id;
  by_correlation_[correlation_id] = token;
  if (!early_.empty()) resolveEarlyLocked(kNoTime);
}

void ReorderBuffer::launchFailed(uint64_t token) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  Slot* slot = findLocked(token);
  if (slot == nullptr) return;
  ++stats_.failed_launches;
  slot->state = State::kComplete;
  slot->failed = true;
  drainLocked();
}

bool ReorderBuffer::completeLibraryOp(uint64_t token, const std::function<void(LibraryOp&)>& update) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  Slot* slot = findLocked(token);
  if (slot == nullptr || !slot->is_library || !slot->op) return false;
  if (update) update(*slot->op);
  slot->state = State::kComplete;
  drainLocked();
  return true;
}

bool ReorderBuffer::discardLibraryOp(uint64_t token) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  Slot* slot = findLocked(token);
  if (slot == nullptr || !slot->is_library || !slot->op) return false;
  slot->discarded = true;
  slot->state = State::kComplete;
  drainLocked();
  return true;
}

void ReorderBuffer::ignoreCorrelation(uint64_t correlation_id, int64_t now_ns) {
  constexpr size_t kMaxIgnored = 1 << 16;
  std::lock_guard lk(mu_);
  forgetIgnoredBeforeLocked(now_ns - kIgnoreForNs);
  if (!ignored_.insert(correlation_id).second) return;
  ignored_order_.emplace_back(correlation_id, now_ns);
  if (ignored_order_.size() > kMaxIgnored) {
    ignored_.erase(ignored_order_.front().first);
    ignored_order_.pop_front();
  }
}

void ReorderBuffer::forgetIgnoredBeforeLocked(int64_t time_ns) {
  while (!ignored_order_.empty() && ignored_order_.front().second < time_ns) {
    ignored_.erase(ignored_order_.front().first);  // no-op if its record came
    ignored_order_.pop_front();
  }
}

void ReorderBuffer::addActivity(const Activity& activity) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  ++stats_.activities;
  if (activity.kind != db::EventKind::kKernel && !ignored_.empty()) {
    // A record runs after its call: one ignored longer ago than kIgnoreForNs is not for it.
    if (activity.gpu_start_ns != db::kUnset) forgetIgnoredBeforeLocked(activity.gpu_start_ns - kIgnoreForNs);
    if (ignored_.erase(activity.correlation_id) > 0) {
      ++stats_.own_records;
      return;
    }
  }
  if (options_.place_records) {
    const int64_t ended = activity.gpu_end_ns != db::kUnset ? activity.gpu_end_ns : activity.gpu_start_ns;
    if (ended != db::kUnset) now_ns_ = std::max(now_ns_, ended);
  }
  // A held record (placement) may be written at once too: its hold can be over already.
  if (!matchLocked(activity, /*final=*/false) && !options_.place_records) return;
  drainLocked();
}

// Matches a record to its slot, or settles it as unmatched (final) or early (held for a poll).
// Returns whether a slot may have completed.
bool ReorderBuffer::matchLocked(const Activity& activity, bool final) {
  auto it = by_correlation_.find(activity.correlation_id);
  Slot* slot = it == by_correlation_.end() ? nullptr : findLocked(it->second);
  if (slot == nullptr && !final && mayBeEarlyLocked(activity)) {
    // A launch is between its API enter and exit: this may be its record, come before its slot.
    early_.push_back(activity);
    ++stats_.held_early;
    return false;
  }
  if (activity.own && (slot == nullptr || slot->is_library || !slot->launch.is_graph)) {
    ++stats_.own_records;  // a digest of a graph launch the buffer holds no slot for
    return false;
  }
  if (slot != nullptr && !slot->is_library && !slot->launch.is_graph &&
      slot->launch.kind == db::EventKind::kKernel && activity.kind != db::EventKind::kKernel) {
    ++stats_.own_records;  // issued inside the launch's callback: the tracer's, not the program's
    return false;
  }
  if (slot == nullptr) {
    bool late = activity.correlation_id != 0 &&
                written_incomplete_ids_.count(activity.correlation_id) > 0;
    if (late) {
      ++stats_.late;
      return false;
    }
    if (options_.place_records && !options_.drop_unmatched) {
      holdRecordLocked(activity);  // written in correlation order among the slots
      return false;
    }
    // No API slot: write it now, in arrival order (unless a window skipped its launch).
    ++stats_.unmatched;
    if (options_.drop_unmatched) return false;
    Slot orphan;
    orphan.launch.correlation_id = activity.correlation_id;
    orphan.launch.kind = activity.kind;
    orphan.records.push_back(activity);
    writeSlotLocked(orphan);
    return false;
  }
  ++stats_.matched;
  if (slot->correlation_ids[1] != 0 && slot->correlation_ids[1] == activity.correlation_id) {
    ++stats_.matched_by_alias;
  }
  if (slot->launch.is_graph) {
    ++slot->received;
    if (activity.own) {
      ++stats_.own_records;
      if (slot->launch.graph_ops && slot->own_starts.size() < options_.max_group_records) {
        slot->own_starts.push_back(activity.gpu_start_ns);
      }
    } else if (slot->records.size() < options_.max_group_records) {
      slot->records.push_back(activity);
    } else {
      ++stats_.group_records_dropped;
    }
    int32_t expected = slot->launch.expected_activities;
    if (expected >= 0 && slot->received >= expected) slot->state = State::kComplete;
  } else {
    slot->records.assign(1, activity);
    slot->state = State::kComplete;
  }
  return true;
}

// Only a plain kernel launch takes its slot at its API exit: copies, memsets, graph-replayed
// kernels and the tracer's own have theirs at API time or none, and are never held.
bool ReorderBuffer::mayBeEarlyLocked(const Activity& activity) const {
  if (activity.kind != db::EventKind::kKernel || activity.own || activity.graph_id != db::kUnset) {
    return false;
  }
  if (early_.size() >= kMaxEarly) return false;
  if (activity.correlation_id != 0 && written_incomplete_ids_.count(activity.correlation_id) > 0) {
    return false;  // late, not early
  }
  // A launch between its API enter and exit, or a ticket taken and not yet published (the
  // FIFO cannot go past it): the record's slot may still come.
  return inFlightLocked() > 0 || next_ticket_.load(std::memory_order_acquire) != consumed_;
}

// Tries the held records again: those whose slot came in are matched; the others are settled as
// unmatched once no launch is in flight and every ticket is in (their slot cannot come any more),
// or, given the time now (CUPTI's clock), once kEarlyWaitNs have passed since their kernel ended.
void ReorderBuffer::resolveEarlyLocked(int64_t now_ns) {
  std::deque<Activity> held;
  held.swap(early_);
  const bool quiet =
      inFlightLocked() == 0 && next_ticket_.load(std::memory_order_acquire) == consumed_;
  for (const Activity& a : held) {
    auto it = by_correlation_.find(a.correlation_id);
    const bool found = it != by_correlation_.end() && findLocked(it->second) != nullptr;
    const int64_t ended = a.gpu_end_ns != db::kUnset ? a.gpu_end_ns : a.gpu_start_ns;
    const bool expired = now_ns == kSettleAll ||
                         (now_ns != kNoTime && (ended == db::kUnset || now_ns - ended > kEarlyWaitNs));
    if (found || quiet || expired) {
      (void)matchLocked(a, /*final=*/true);
    } else {
      early_.push_back(a);
    }
  }
  drainLocked();
}

void ReorderBuffer::poll(int64_t now_ns) {
  std::lock_guard lk(mu_);
  now_ns_ = std::max(now_ns_, now_ns);
  drainIngressLocked();
  if (!early_.empty()) resolveEarlyLocked(now_ns);
  drainLocked();
  while (!pending_.empty()) {
    const int64_t cpu_ns = nextLocked()->launch.cpu_ns;
    if (cpu_ns == db::kUnset || now_ns - cpu_ns <= options_.timeout_ns) break;
    writeHeadLocked(Reason::kTimeout);
    drainLocked();
  }
}

void ReorderBuffer::flush() {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  if (!early_.empty()) resolveEarlyLocked(kSettleAll);  // matched if its slot is in, else unmatched
  while (!pending_.empty()) writeHeadLocked(Reason::kFlush);
  writeHeldBeforeLocked(UINT64_MAX);
  // Every record placed so far is written: a window still open now belongs to a call under way
  // at a capture's stop, whose closing edge will not come (the stop turned placement off); kept,
  // it would parent every later record of its stream after the next start.
  window_edges_.clear();
  open_windows_.clear();
}

void ReorderBuffer::settle(uint32_t context) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  if (options_.place_records) {
    placeLocked(context == 0 ? kSettleEverything : settleBeforeLocked(context));
  } else {
    drainLocked();
  }
}

// Just past the last place of the records of `context` held or gathered in a pending slot (a
// graph launch's); kSettleNothing if it has none.
uint64_t ReorderBuffer::settleBeforeLocked(uint32_t context) {
  uint64_t last = 0;
  bool any = false;
  for (const auto& [id, record] : held_) {
    if (record.context == context) {
      last = std::max(last, id);
      any = true;
    }
  }
  for (const Slot& slot : pending_) {
    if (!slot.records.empty() && slot.records.front().context == context) {
      last = std::max(last, slot.place);
      any = true;
    }
  }
  return any ? last + 1 : kSettleNothing;
}

void ReorderBuffer::drainLocked() {
  if (options_.place_records) {
    placeLocked(kSettleNothing);
    return;
  }
  while (!pending_.empty() && pending_.front().state == State::kComplete) {
    writeHeadLocked(Reason::kComplete);
  }
}

// ---- placement by correlation id ----

uint64_t ReorderBuffer::positionOf(const Slot& slot) {
  if (slot.is_library) return slot.op ? slot.op->position : 0;
  return slot.launch.correlation_id;
}

// A slot's place: its position, or for one of unknown position (0) the largest place given before
// it (it came in after those slots: it is written just after them, as in ticket order).
void ReorderBuffer::placeSlotLocked(Slot& slot) {
  const uint64_t position = positionOf(slot);
  slot.place = position != 0 ? position : last_place_;
  last_place_ = std::max(last_place_, slot.place);
  by_place_.emplace_back(slot.place, slot.token);
  std::push_heap(by_place_.begin(), by_place_.end(), std::greater<>());
}

void ReorderBuffer::holdRecordLocked(const Activity& activity) {
  // Records come nearly in correlation order (per context and stream): most go at the back.
  const uint64_t id = activity.correlation_id;
  if (held_.empty() || held_.back().first <= id) {
    held_.emplace_back(id, activity);
  } else {
    auto at = std::upper_bound(held_.begin(), held_.end(), id,
                               [](uint64_t v, const std::pair<uint64_t, Activity>& e) { return v < e.first; });
    held_.emplace(at, id, activity);
  }
  if (held_.size() > std::max<size_t>(options_.max_held_records, 1)) {
    ++stats_.placed_forced;
    // A head placed before the oldest record (an op still waiting, e.g. for NCCL's choices) goes
    // first, as at its timeout: written after it, its own kernels would lose it as parent.
    if (!pending_.empty() && nextLocked()->place < held_.front().first) {
      writeHeadLocked(Reason::kOverflow);
    } else {
      writeHeldFrontLocked();
    }
  }
}

// Writes, in correlation order, the complete head slots and the held records whose hold is over,
// and those placed before `settle_before` whatever their hold. An incomplete head still waits: the
// timeout and flush write it.
void ReorderBuffer::placeLocked(uint64_t settle_before) {
  const int64_t hold = options_.records_hold_ns;
  auto oldEnough = [&](int64_t t, uint64_t place) {
    return place < settle_before || t == db::kUnset ||
           (now_ns_ != INT64_MIN && now_ns_ - t >= hold);
  };
  for (;;) {
    const Slot* head = pending_.empty() ? nullptr : &*nextLocked();
    const bool have_held = !held_.empty();
    if (head != nullptr && (!have_held || head->place < held_.front().first)) {
      if (head->state != State::kComplete || !oldEnough(head->launch.cpu_ns, head->place)) return;
      writeHeadLocked(Reason::kComplete);
    } else if (have_held) {
      if (!oldEnough(held_.front().second.gpu_start_ns, held_.front().first)) return;
      writeHeldFrontLocked();
    } else {
      return;
    }
  }
}

// Writes the held records placed before `position` (all of them: UINT64_MAX), in order.
void ReorderBuffer::writeHeldBeforeLocked(uint64_t position) {
  while (!held_.empty() && held_.front().first < position) writeHeldFrontLocked();
}

void ReorderBuffer::writeHeldFrontLocked() {
  const uint64_t id = held_.front().first;
  Slot orphan;
  orphan.launch.correlation_id = id;
  orphan.launch.kind = held_.front().second.kind;
  orphan.records.push_back(std::move(held_.front().second));
  held_.pop_front();
  orphan.parent = windowParentLocked(id, orphan.records.front().stream);
  if (orphan.parent != 0) ++stats_.placed_with_parent;
  if (id < written_position_) {
    ++stats_.placed_late;
  } else {
    written_position_ = id;
  }
  ++stats_.placed;
  writeSlotLocked(orphan);
}

// The innermost library call whose window holds `correlation_id` and takes records of `stream`
// (0: none). Records are written in correlation order, so the windows move forward with them: a
// record that comes after records past it were written (a late one) has no parent.
uint64_t ReorderBuffer::windowParentLocked(uint64_t correlation_id, int64_t stream) {
  if (correlation_id < windows_at_) return 0;
  // A window holds the ids strictly between its edges: the opens before the id, the closes up to it.
  while (!window_edges_.empty() && (window_edges_.front().position < correlation_id ||
                                    (window_edges_.front().position == correlation_id && !window_edges_.front().open))) {
    applyWindowEdgeLocked(window_edges_.front());
    window_edges_.pop_front();
  }
  windows_at_ = correlation_id;
  for (auto w = open_windows_.rbegin(); w != open_windows_.rend(); ++w) {
    if (w->stream == db::kUnset || w->stream == stream) return w->token;
  }
  return 0;
}

void ReorderBuffer::takeWindowEdgeLocked(const Cell& cell) {
  const uint64_t token = cell.parent, position = cell.alias;
  if (token == 0) return;
  if (cell.what == Cell::What::kWindowOpen) {
    if (position == 0) return;  // no marker: no window (its kernels get no parent)
    insertWindowEdgeLocked({position, token, cell.launch.stream, true});
    return;
  }
  uint64_t at = position;
  if (at == 0) {  // no closing marker: an empty window, closed just after it opened
    for (auto e = window_edges_.rbegin(); e != window_edges_.rend(); ++e) {
      if (e->open && e->token == token) {
        at = e->position + 1;
        break;
      }
    }
    if (at == 0) {  // its opening edge was applied already
      closeOpenWindowLocked(token);
      return;
    }
  }
  insertWindowEdgeLocked({at, token, db::kUnset, false});
}

void ReorderBuffer::insertWindowEdgeLocked(const WindowEdge& edge) {
  if (edge.position < windows_at_) {  // the records past it are written already
    if (!edge.open) closeOpenWindowLocked(edge.token);
    return;
  }
  // Edges come nearly in order (threads take their markers and tickets a little apart).
  auto it = window_edges_.end();
  while (it != window_edges_.begin() && std::prev(it)->position > edge.position) --it;
  window_edges_.insert(it, edge);
  if (window_edges_.size() > kMaxWindowEdges) {
    applyWindowEdgeLocked(window_edges_.front());
    windows_at_ = std::max(windows_at_, window_edges_.front().position);
    window_edges_.pop_front();
  }
}

void ReorderBuffer::applyWindowEdgeLocked(const WindowEdge& edge) {
  if (!edge.open) {
    closeOpenWindowLocked(edge.token);
    return;
  }
  open_windows_.push_back({edge.token, edge.stream});
  if (open_windows_.size() > kMaxOpenWindows) open_windows_.erase(open_windows_.begin());
}

void ReorderBuffer::closeOpenWindowLocked(uint64_t token) {
  for (auto w = open_windows_.rbegin(); w != open_windows_.rend(); ++w) {
    if (w->token == token) {
      open_windows_.erase(std::next(w).base());
      return;
    }
  }
}

void ReorderBuffer::rememberIncompleteLocked(uint64_t correlation_id) {
  // As many as the buffer holds: after a stall (a GPU waiting seconds on a collective) every slot
  // may have gone out incomplete, and their records all come once the GPU moves on. Memory is
  // taken only as slots go out so.
  if (written_incomplete_.size() >= max_incomplete_) {
    auto it = written_incomplete_ids_.find(written_incomplete_.front());
    if (it != written_incomplete_ids_.end()) written_incomplete_ids_.erase(it);  // one copy of a repeated id
    written_incomplete_.pop_front();
  }
  written_incomplete_.push_back(correlation_id);
  written_incomplete_ids_.insert(correlation_id);
}

// Writes the slot due next (nextLocked): the FIFO's head, or with placement the first placed.
void ReorderBuffer::writeHeadLocked(Reason reason) {
  if (options_.place_records) {
    // Placement: the held records placed before the head go first (a no-op when placeLocked
    // writes it; the timeout, overflow and flush write heads without it).
    const uint64_t place = nextLocked()->place;
    writeHeldBeforeLocked(place);
    written_position_ = std::max(written_position_, place);
  }
  const auto at = nextLocked();
  Slot& head = *at;
  if (head.state != State::kComplete) {
    if (reason == Reason::kTimeout) ++stats_.timed_out;
    if (reason == Reason::kFlush) ++stats_.flushed_incomplete;
    if (reason == Reason::kOverflow) ++stats_.overflowed;
    // A graph whose record count was unknown: remember what arrived for its next launch. (Not
    // one whose count varies: the next launch may run more kernels, or fewer.)
    if (head.launch.is_graph && head.launch.expected_activities == kRecordsUnknown &&
        !head.graph_forgotten && head.received > 0 &&
        graph_records_.size() < options_.max_remembered_graphs) {
      graph_records_.emplace(head.launch.graph_key, static_cast<int32_t>(head.received));
    }
    for (uint64_t id : head.correlation_ids) {
      if (id != 0) rememberIncompleteLocked(id);
    }
  }
  forgetCorrelationsLocked(head);
  Slot slot = std::move(head);
  if (options_.place_records && !by_place_.empty()) {
    std::pop_heap(by_place_.begin(), by_place_.end(), std::greater<>());  // at's entry
    by_place_.pop_back();
  }
  pending_.erase(at);  // near the front: the ops that came in before it, out of place
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

// A graph's records in GPU order (node id breaks ties).
static void sortByGpuStart(std::vector<Activity>& records) {
  std::stable_sort(records.begin(), records.end(), [](const Activity& a, const Activity& b) {
    return a.gpu_start_ns != b.gpu_start_ns ? a.gpu_start_ns < b.gpu_start_ns
                                            : a.graph_node_id < b.graph_node_id;
  });
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
  if (slot.is_library && slot.discarded) {
    ++stats_.discarded_ops;
    if (options_.on_written) options_.on_written(slot.token, kSeqDiscarded);
    return;
  }
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
  if (slot.launch.graph_ops && !slot.launch.graph_ops->empty()) {
    writeGraphLocked(slot, base);
    return;
  }
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
  sortByGpuStart(slot.records);
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

// Where the replayed ops of a graph launch go among its records (in GPU order): op i is written
// just before record place[i] (records.size(): after the last), and a record belongs to the op
// whose kernel it is (owner, -1: none). Two ways, per op:
//   - By node ids: a record whose graph node id is one of the op's (its call's nodes at capture,
//     and their copies at instantiation) is the op's kernel, wherever its digests are; the op goes
//     just before the first of them. Exact on concurrent branches too.
//   - Otherwise by counting the tracer's own kernels, which bracket each op's kernels in the
//     graph: own_before of them (its input digests), then its kernels, then own_after (its output
//     digests). In a graph whose captured ops ran one after another, op i's kernels are the
//     records that start after exactly anchor_i own kernels, anchor_i being the own kernels of the
//     ops before it plus its own_before. Ops on concurrent branches may be placed among each
//     other's kernels. An op placed `by_nodes` none of whose nodes came owns nothing (with no own
//     kernel before it, counting would take the program's kernel before it for its own).
// Ops whose own kernels did not all come are written after the last record.
struct GraphPlacement {
  std::vector<size_t> place;
  std::vector<int32_t> owner;
  int64_t by_count = 0;  // ops placed by counting own kernels
};

// Marks each record that is a node of an op's as that op's; returns which ops were so placed.
static std::vector<bool> placeByNodeIds(const GraphOpTemplates& ops, const std::vector<Activity>& records,
                                        GraphPlacement& p) {
  std::vector<std::pair<int64_t, int32_t>> ids;  // (node id, op), sorted
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int64_t id : ops[i].node_ids) ids.emplace_back(id, static_cast<int32_t>(i));
  }
  std::vector<bool> placed(ops.size(), false);
  if (ids.empty()) return placed;
  std::sort(ids.begin(), ids.end());
  for (size_t r = 0; r < records.size(); ++r) {
    const int64_t node = records[r].graph_node_id;
    if (node == db::kUnset) continue;
    auto it = std::lower_bound(ids.begin(), ids.end(), std::pair<int64_t, int32_t>{node, -1});
    if (it == ids.end() || it->first != node) continue;
    const int32_t op = it->second;
    p.owner[r] = op;
    if (!placed[op]) p.place[op] = r;  // records are in GPU order: its first kernel
    placed[op] = true;
  }
  return placed;
}

static GraphPlacement placeGraphOps(const GraphOpTemplates& ops, const std::vector<Activity>& records,
                                    std::vector<int64_t> own_starts) {
  GraphPlacement p;
  p.place.assign(ops.size(), records.size());
  p.owner.assign(records.size(), -1);
  const std::vector<bool> by_node = placeByNodeIds(ops, records, p);
  std::sort(own_starts.begin(), own_starts.end());
  std::vector<int64_t> anchor(ops.size());
  int64_t total = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    anchor[i] = total + std::max(ops[i].own_before, 0);
    total = anchor[i] + std::max(ops[i].own_after, 0);
    if (!by_node[i] && !ops[i].refused) ++p.by_count;  // a refused op is placed, never written
  }
  size_t own = 0, next = 0;  // own kernels started so far; the next op to place
  int64_t counted = -1;      // the last op placed by counting, while it may own records
  for (size_t r = 0; r < records.size(); ++r) {
    while (own < own_starts.size() && own_starts[own] <= records[r].gpu_start_ns) ++own;
    const auto seen = static_cast<int64_t>(own);
    for (; next < ops.size() && anchor[next] <= seen; ++next) {
      if (by_node[next]) continue;
      p.place[next] = r;
      if (!ops[next].by_nodes) counted = static_cast<int64_t>(next);
    }
    if (p.owner[r] >= 0) {
      // A kernel of an op after it (by node ids): the counted op's kernels are behind it.
      if (p.owner[r] > counted) counted = -1;
      continue;
    }
    // The last op placed by counting owns the record if no own kernel ran since it was placed.
    // (An op placed by node ids may share its anchor: with nothing of its own before its kernels.)
    if (counted >= 0 && anchor[static_cast<size_t>(counted)] == seen) {
      p.owner[r] = static_cast<int32_t>(counted);
    }
  }
  return p;
}

void ReorderBuffer::writeGraphLocked(Slot& slot, const db::Event& base) {
  const GraphOpTemplates& ops = *slot.launch.graph_ops;
  auto count = [this](std::optional<int64_t> seq) {
    if (!seq) ++stats_.sink_dropped;
    return seq;
  };
  sortByGpuStart(slot.records);
  GraphPlacement placed = placeGraphOps(ops, slot.records, std::move(slot.own_starts));
  // Each op's GPU time: from its first kernel's start to its last kernel's end.
  std::vector<int64_t> start(ops.size(), db::kUnset), end(ops.size(), db::kUnset);
  for (size_t r = 0; r < slot.records.size(); ++r) {
    int32_t o = placed.owner[r];
    if (o < 0) continue;
    const Activity& a = slot.records[r];
    if (start[o] == db::kUnset || a.gpu_start_ns < start[o]) start[o] = a.gpu_start_ns;
    if (end[o] == db::kUnset || a.gpu_end_ns > end[o]) end[o] = a.gpu_end_ns;
  }
  stats_.graph_ops_by_count += placed.by_count;
  // Ops in the order of their places (by node ids, ops on concurrent branches may come in another
  // order than their calls'); call order among ops placed alike.
  std::vector<size_t> order(ops.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return placed.place[a] < placed.place[b]; });
  std::optional<int64_t> first;
  std::vector<std::optional<int64_t>> op_seq(ops.size());
  size_t next = 0;
  auto writeOpsUpTo = [&](size_t r) {
    for (; next < order.size() && placed.place[order[next]] <= r; ++next) {
      const size_t i = order[next];
      op_seq[i] = writeGraphOpLocked(slot, i, base, start[i], end[i]);
      if (!first) first = op_seq[i];
    }
  };
  if (slot.records.empty()) {  // no GPU records (timeout, flush): the launch, then its ops
    first = count(sink_.append(base));
  }
  for (size_t r = 0; r < slot.records.size(); ++r) {
    writeOpsUpTo(r);
    db::Event e = base;
    applyActivity(e, slot.records[r]);
    if (int32_t o = placed.owner[r]; o >= 0 && op_seq[o]) e.parent_seq = *op_seq[o];
    auto seq = count(sink_.append(e));
    if (!first) first = seq;
  }
  writeOpsUpTo(SIZE_MAX);
  rememberSeqLocked(slot.token, first);
  if (slot.launch.notify_written && options_.on_written) {
    options_.on_written(slot.token, first.value_or(kSeqDropped));
  }
}

std::optional<int64_t> ReorderBuffer::writeGraphOpLocked(const Slot& slot, size_t i,
                                                         const db::Event& base, int64_t gpu_start,
                                                         int64_t gpu_end) {
  const GraphOpTemplate& t = (*slot.launch.graph_ops)[i];
  const uint64_t token = slot.token + 1 + i;
  if (t.refused || slot.failed) {  // a call its library refused, or a failed launch: nothing ran
    rememberSeqLocked(token, std::nullopt);
    if (options_.on_written) options_.on_written(token, kSeqDiscarded);
    return std::nullopt;
  }
  db::Event e = t.op.event;
  e.cpu_ns = slot.launch.cpu_ns;
  if (base.stream != db::kUnset) e.stream = base.stream;
  e.correlation_id = base.correlation_id;  // the graph launch's, like its kernels'
  e.parent_seq = base.parent_seq;
  e.gpu_start_ns = gpu_start;
  e.gpu_end_ns = gpu_end;
  std::optional<int64_t> seq;
  if (const auto* c = std::get_if<db::Collective>(&t.op.detail)) {
    db::Collective coll = *c;
    if (i < slot.launch.graph_op_comm_seqs.size() && slot.launch.graph_op_comm_seqs[i] != db::kUnset) {
      coll.comm_seq = slot.launch.graph_op_comm_seqs[i];
    }
    seq = sink_.appendCollective(e, coll);
  } else if (const auto* g = std::get_if<db::Gemm>(&t.op.detail)) {
    seq = sink_.appendGemm(e, *g);
  } else {
    seq = sink_.appendMarker(e, std::get<db::Marker>(t.op.detail));
  }
  if (!seq) ++stats_.sink_dropped;
  ++stats_.graph_ops;
  if (seq) {
    db::GraphOp row;
    row.seq = *seq;
    row.template_seq = t.template_seq;
    if (row.template_seq == db::kUnset && t.template_token != 0) {
      row.template_seq = seqOfLocked(t.template_token).value_or(db::kUnset);
    }
    row.replay = slot.launch.graph_replay;
    row.graph_exec = static_cast<int64_t>(slot.launch.graph_key);
    if (!sink_.appendGraphOp(row)) ++stats_.graph_op_rows_dropped;
  }
  rememberSeqLocked(token, seq);
  if (options_.on_written) options_.on_written(token, seq.value_or(kSeqDropped));
  return seq;
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

void ReorderBuffer::forgetGraph(uint64_t graph_key) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  graph_records_.erase(graph_key);
  for (Slot& slot : pending_) {
    if (slot.launch.is_graph && slot.launch.graph_key == graph_key) slot.graph_forgotten = true;
  }
}

void ReorderBuffer::setPlaceRecords(bool on) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  if (!on && options_.place_records) {
    placeLocked(kSettleEverything);
    writeHeldBeforeLocked(UINT64_MAX);
    by_place_.clear();  // what still waits goes in ticket order
  }
  if (on && !options_.place_records) {
    for (Slot& slot : pending_) placeSlotLocked(slot);
  }
  options_.place_records = on;
  drainLocked();
}

std::optional<int64_t> ReorderBuffer::seqOf(uint64_t token) {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  drainLocked();
  return seqOfLocked(token);
}

ReorderStats ReorderBuffer::stats() {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  drainLocked();
  return stats_;
}

size_t ReorderBuffer::pending() {
  std::lock_guard lk(mu_);
  drainIngressLocked();
  drainLocked();
  return pending_.size();
}

}  // namespace detrace::tracer
