// See look_back.h.
#include "detrace/tracer/look_back.h"

namespace detrace::tracer {

void LookBack::decide(uint64_t token, int64_t index, int64_t opened_at, Verdicts& v) const {
  // Kept: the B launches before the opening one (opened_at - before <= index), and any launch
  // admitted speculatively after it (a race between threads at the opening: in the window).
  if (index >= opened_at - before_) {
    v.keep.push_back(token);
  } else {
    v.drop.push_back(token);
  }
}

LookBack::Verdicts LookBack::issued(const WindowGate::LaunchTicket& ticket) {
  Verdicts v;
  if (ticket.speculative || ticket.opened_at < 0 || openedAt() >= 0) return v;
  std::lock_guard lk(mu_);
  if (opened_at_.load(std::memory_order_relaxed) >= 0) return v;  // another thread decided
  for (const auto& [index, token] : held_) decide(token, index, ticket.opened_at, v);
  held_.clear();
  opened_at_.store(ticket.opened_at, std::memory_order_release);
  return v;
}

LookBack::Verdicts LookBack::began(uint64_t token, int64_t index) {
  Verdicts v;
  std::lock_guard lk(mu_);
  if (int64_t opened = opened_at_.load(std::memory_order_relaxed); opened >= 0) {
    decide(token, index, opened, v);
    return v;
  }
  held_.emplace(index, token);
  while (static_cast<int64_t>(held_.size()) > before_) {
    v.drop.push_back(held_.begin()->second);
    held_.erase(held_.begin());
  }
  return v;
}

LookBack::Verdicts LookBack::dropAll() {
  Verdicts v;
  std::lock_guard lk(mu_);
  for (const auto& [index, token] : held_) v.drop.push_back(token);
  held_.clear();
  return v;
}

size_t LookBack::held() const {
  std::lock_guard lk(mu_);
  return held_.size();
}

}  // namespace detrace::tracer
