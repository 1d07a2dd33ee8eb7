#include "detrace/tracer/late_comms.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace detrace::tracer {
namespace {

// The kernel copies, or answers EFAULT for memory that is not mapped: no signal in this process.
std::optional<const void*> readByVm(const void* const* slot, bool* refused) noexcept {
  const void* value = nullptr;
  iovec local{&value, sizeof value};
  iovec remote{const_cast<const void**>(slot), sizeof value};
  const ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(sizeof value)) return value;
  *refused = n < 0 && (errno == ENOSYS || errno == EPERM);
  return std::nullopt;
}

// Where process_vm_readv is refused (a seccomp filter): write() from the slot into a pipe, which
// answers EFAULT the same way.
std::optional<const void*> readByPipe(const void* const* slot) noexcept {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return std::nullopt;
  const void* value = nullptr;
  std::optional<const void*> out;
  if (::write(fds[1], slot, sizeof value) == static_cast<ssize_t>(sizeof value) &&
      ::read(fds[0], &value, sizeof value) == static_cast<ssize_t>(sizeof value)) {
    out = value;
  }
  ::close(fds[0]);
  ::close(fds[1]);
  return out;
}

}  // namespace

std::optional<const void*> LateComms::readSlot(const void* const* slot) noexcept {
  if (slot == nullptr) return std::nullopt;
  static std::atomic<bool> vm_refused{false};
  if (!vm_refused.load(std::memory_order_relaxed)) {
    bool refused = false;
    auto value = readByVm(slot, &refused);
    if (!refused) return value;
    vm_refused.store(true, std::memory_order_relaxed);
  }
  return readByPipe(slot);
}

void LateComms::expect(const void* const* slot, const CommInfo& info) {
  if (slot == nullptr) return;
  std::lock_guard lk(mu_);
  std::erase_if(expected_, [&](const Expected& e) { return e.slot == slot; });
  if (expected_.size() >= kMaxExpected) expected_.erase(expected_.begin());
  expected_.push_back({slot, info});
  expected_count_.store(expected_.size(), std::memory_order_release);
}

LateComms::Claim LateComms::claim(const void* comm) {
  std::lock_guard lk(mu_);
  if (std::find(strangers_.begin(), strangers_.end(), comm) != strangers_.end()) {
    return {Outcome::kSeen, {}};
  }
  for (auto it = expected_.begin(); it != expected_.end(); ++it) {
    const auto value = reader_(it->slot);
    if (!value || *value != comm || comm == nullptr) continue;
    const CommInfo info = it->info;
    expected_.erase(it);
    expected_count_.store(expected_.size(), std::memory_order_release);
    return {Outcome::kFollowed, info};
  }
  if (strangers_.size() >= kMaxStrangers) return {Outcome::kSeen, {}};  // counted no more
  strangers_.push_back(comm);
  return {Outcome::kStranger, {}};
}

void LateComms::forget(const void* comm) {
  std::lock_guard lk(mu_);
  std::erase(strangers_, comm);
}

}  // namespace detrace::tracer
