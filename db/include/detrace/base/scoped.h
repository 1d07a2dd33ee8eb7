// ScopedResource<T, Deleter>: the owner of one C handle (sqlite3*, sqlite3_stmt*, CUmodule, a file
// descriptor, ...). Move-only; releases the handle exactly once.
#pragma once

#include <utility>

namespace detrace {

template <typename T, auto kRelease, T kInvalid = T{}>
class ScopedResource {
 public:
  ScopedResource() = default;
  explicit ScopedResource(T handle) : handle_(handle) {}
  ~ScopedResource() { reset(); }
  ScopedResource(const ScopedResource&) = delete;
  ScopedResource& operator=(const ScopedResource&) = delete;
  ScopedResource(ScopedResource&& other) noexcept : handle_(other.release()) {}
  ScopedResource& operator=(ScopedResource&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != kInvalid; }
  T release() { return std::exchange(handle_, kInvalid); }
  void reset(T handle = kInvalid) {
    T old = std::exchange(handle_, handle);
    if (old != kInvalid) kRelease(old);
  }

 private:
  T handle_ = kInvalid;
};

}  // namespace detrace
