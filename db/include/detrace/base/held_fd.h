// HeldFd: a file descriptor that detrace holds inside someone else's program.
//
// A program may close descriptors it did not open: a daemon closes everything above stderr, a
// launcher calls close_range(3, ~0U), a library dup2()s onto a number it thinks is free. The
// number of a descriptor the tracer held then names nothing, or, once the program opens a file,
// the program's file. Writing, reading, accepting or closing through that number would then act
// on the program's file, socket or pipe: the one harm a recorder must never do. So:
//  - moveFdHigh() puts the tracer's descriptors far above the lowest free numbers, which are the
//    ones open(), socket() and pipe() hand out: a closed one of ours is seldom taken again;
//  - a HeldFd remembers what its descriptor named (device and inode) and intact() asks whether the
//    number still names it, before each use that could touch someone else's file;
//  - a HeldFd closes its number only while it is intact; otherwise it forgets it.
// fdNames() is async-signal-safe (fstat only), for signal handlers.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

namespace detrace {

struct FdIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool operator==(const FdIdentity&) const = default;
};

// The lowest number moveFdHigh() uses: 64 below the smaller of RLIMIT_NOFILE's soft limit and
// 4096 (a program's descriptor table grows to the highest number in use, so not higher), or -1
// when the limit leaves no room (below 128).
int highFdBase() noexcept;

// Moves `fd` to a number at or above highFdBase() (close-on-exec) and closes the old number.
// Returns the new number, or `fd` itself when it cannot be moved (no room, or out of numbers).
int moveFdHigh(int fd) noexcept;

// What `fd` names now, or nullopt when it names nothing (closed).
std::optional<FdIdentity> fdIdentity(int fd) noexcept;

// True if `fd` still names `id`. Async-signal-safe.
bool fdNames(int fd, FdIdentity id) noexcept;

class HeldFd {
 public:
  HeldFd() = default;
  // Takes `fd` (just opened by the tracer): moves it high and remembers what it names. An
  // invalid `fd` (< 0) gives an empty HeldFd.
  explicit HeldFd(int fd) noexcept;
  ~HeldFd() { reset(); }
  HeldFd(const HeldFd&) = delete;
  HeldFd& operator=(const HeldFd&) = delete;
  HeldFd(HeldFd&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), id_(other.id_) {}
  HeldFd& operator=(HeldFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
      id_ = other.id_;
    }
    return *this;
  }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  FdIdentity identity() const noexcept { return id_; }
  // True while the number still names what it named when taken. Async-signal-safe.
  bool intact() const noexcept { return fd_ >= 0 && fdNames(fd_, id_); }
  // Closes the number if it is intact, forgets it either way. Returns false if it was not
  // intact (the program closed it, or put one of its own files there).
  bool reset() noexcept;

 private:
  int fd_ = -1;
  FdIdentity id_{};
};

}  // namespace detrace
