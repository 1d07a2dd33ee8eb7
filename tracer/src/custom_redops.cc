#include "detrace/tracer/custom_redops.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>

namespace detrace::tracer {

uint64_t CustomRedOps::packScalar(const void* scalar, size_t bytes) {
  // Every platform the tracer builds for (x86-64, aarch64) is little-endian: the copy is the
  // value's bytes in order, zero-extended.
  static_assert(std::endian::native == std::endian::little);
  uint64_t v = 0;
  if (scalar != nullptr) std::memcpy(&v, scalar, std::min(bytes, sizeof v));
  return v;
}

bool CustomRedOps::add(const void* comm, int32_t op, const PreMulSum& info) {
  std::lock_guard lk(mu_);
  auto it = ops_.find({comm, op});
  if (it != ops_.end()) {
    it->second = info;
    return true;
  }
  if (ops_.size() >= kMaxOps) return false;
  ops_.emplace(Key{comm, op}, info);
  return true;
}

void CustomRedOps::remove(const void* comm, int32_t op) {
  std::lock_guard lk(mu_);
  ops_.erase({comm, op});
}

void CustomRedOps::removeComm(const void* comm) {
  std::lock_guard lk(mu_);
  ops_.erase(ops_.lower_bound({comm, INT32_MIN}), ops_.upper_bound({comm, INT32_MAX}));
}

std::optional<CustomRedOps::PreMulSum> CustomRedOps::find(const void* comm, int32_t op) const {
  std::lock_guard lk(mu_);
  auto it = ops_.find({comm, op});
  if (it == ops_.end()) return std::nullopt;
  return it->second;
}

size_t CustomRedOps::size() const {
  std::lock_guard lk(mu_);
  return ops_.size();
}

}  // namespace detrace::tracer
