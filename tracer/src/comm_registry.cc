#include "detrace/tracer/comm_registry.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace detrace::tracer {

int64_t CommRegistry::hashBytes(std::span<const uint8_t> bytes, uint64_t seed) {
  uint64_t h = seed;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

int64_t CommRegistry::idFromUniqueId(std::span<const uint8_t> unique_id) {
  return hashBytes(unique_id);
}

void CommRegistry::add(const void* comm, CommInfo info) {
  std::lock_guard lk(mu_);
  if (comms_.size() >= kMaxComms && !comms_.count(comm)) return;
  comms_[comm] = Entry{info, 0, 0, 0, {}};
}

CommRegistry::Parent CommRegistry::parentLocked(const void* parent, int64_t Entry::*count) {
  Parent p;
  if (auto it = comms_.find(parent); it != comms_.end()) {
    p.id = it->second.info.id;
    p.nth = (it->second.*count)++;
    p.device = it->second.info.device;
  }
  return p;
}

CommInfo CommRegistry::deriveSplit(const void* parent, int32_t color) {
  std::lock_guard lk(mu_);
  const Parent p = parentLocked(parent, &Entry::splits);
  std::array<uint8_t, 20> key{};
  std::memcpy(key.data(), &p.id, 8);
  std::memcpy(key.data() + 8, &p.nth, 8);
  std::memcpy(key.data() + 16, &color, 4);
  return derivedInfo(p, key);
}

CommInfo CommRegistry::deriveShrink(const void* parent, std::span<const int32_t> excluded) {
  std::lock_guard lk(mu_);
  const Parent p = parentLocked(parent, &Entry::shrinks);
  std::vector<int32_t> ranks(excluded.begin(), excluded.end());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  // Tagged so that no shrink's key can equal a split's (20 bytes there, 24 and more here).
  constexpr std::array<uint8_t, 8> kTag{'s', 'h', 'r', 'i', 'n', 'k', 0, 0};
  std::vector<uint8_t> key(kTag.size() + 16 + 4 * ranks.size());
  std::memcpy(key.data(), kTag.data(), kTag.size());
  std::memcpy(key.data() + 8, &p.id, 8);
  std::memcpy(key.data() + 16, &p.nth, 8);
  if (!ranks.empty()) std::memcpy(key.data() + 24, ranks.data(), 4 * ranks.size());
  return derivedInfo(p, key);
}

CommInfo CommRegistry::derivedInfo(const Parent& parent, std::span<const uint8_t> key) {
  return CommInfo{parent.id < 0 ? -1 : hashBytes(key), -1, -1, parent.device};
}

void CommRegistry::remove(const void* comm) {
  std::lock_guard lk(mu_);
  comms_.erase(comm);
}

std::optional<CommInfo> CommRegistry::find(const void* comm) const {
  std::lock_guard lk(mu_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return std::nullopt;
  return it->second.info;
}

int64_t* CommRegistry::counterLocked(Entry& e, int64_t lane) {
  if (lane == kCollectives) return &e.seq;
  if (auto it = e.p2p.find(lane); it != e.p2p.end()) return &it->second;
  if (e.p2p.size() >= kMaxLanes) return nullptr;
  return &e.p2p.emplace(lane, 0).first->second;
}

int64_t CommRegistry::nextSeq(const void* comm, int64_t lane) {
  std::lock_guard lk(mu_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return -1;
  int64_t* next = counterLocked(it->second, lane);
  return next == nullptr ? -1 : (*next)++;
}

void CommRegistry::setDevice(const void* comm, int32_t device) {
  std::lock_guard lk(mu_);
  if (auto it = comms_.find(comm); it != comms_.end()) it->second.info.device = device;
}

bool CommRegistry::returnSeq(const void* comm, int64_t seq, int64_t lane) {
  std::lock_guard lk(mu_);
  auto it = comms_.find(comm);
  if (it == comms_.end() || seq < 0) return false;
  int64_t* next = counterLocked(it->second, lane);
  if (next == nullptr || *next != seq + 1) return false;
  *next = seq;
  return true;
}

int64_t CommRegistry::nextSeqFor(int64_t id, int32_t rank, int64_t lane) {
  std::lock_guard lk(mu_);
  for (auto& [comm, e] : comms_) {
    if (e.info.id != id || e.info.rank != rank) continue;
    int64_t* next = counterLocked(e, lane);
    return next == nullptr ? -1 : (*next)++;
  }
  return -1;
}

std::optional<CommInfo> CommRegistry::widest() const {
  std::lock_guard lk(mu_);
  std::optional<CommInfo> best;
  for (const auto& [comm, e] : comms_) {
    if (!best || e.info.nranks > best->nranks) best = e.info;
  }
  return best;
}

}  // namespace detrace::tracer
