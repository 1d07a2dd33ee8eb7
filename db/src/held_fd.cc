// HeldFd and its helpers. See detrace/base/held_fd.h.
#include "detrace/base/held_fd.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace detrace {

int highFdBase() noexcept {
  constexpr rlim_t kCeiling = 4096;  // past this, the table's memory (8 bytes a slot) starts to count
  constexpr rlim_t kHeadroom = 64;   // the tracer's own descriptors, above the base
  constexpr rlim_t kLeast = 128;     // below this the program needs every number it has
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  const rlim_t top = lim.rlim_cur == RLIM_INFINITY ? kCeiling : std::min(lim.rlim_cur, kCeiling);
  if (top < kLeast) return -1;
  return static_cast<int>(top - kHeadroom);
}

int moveFdHigh(int fd) noexcept {
  const int base = highFdBase();
  if (fd < 0 || base < 0 || fd >= base) return fd;
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, base);
  if (high < 0) return fd;  // every number above the base taken: keep the low one
  ::close(fd);
  return high;
}

std::optional<FdIdentity> fdIdentity(int fd) noexcept {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return std::nullopt;
  return FdIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

bool fdNames(int fd, FdIdentity id) noexcept {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == id.dev &&
         static_cast<uint64_t>(st.st_ino) == id.ino;
}

HeldFd::HeldFd(int fd) noexcept {
  if (fd < 0) return;
  fd = moveFdHigh(fd);
  std::optional<FdIdentity> id = fdIdentity(fd);
  if (!id) return;  // not a descriptor after all: nothing to hold or close
  fd_ = fd;
  id_ = *id;
}

bool HeldFd::reset() noexcept {
  if (fd_ < 0) return true;
  const bool ours = fdNames(fd_, id_);
  if (ours) ::close(fd_);
  fd_ = -1;
  return ours;
}

}  // namespace detrace
