// SQLite's descriptors, guarded against a program that closes them. See sqlite_fd_guard.h.
#include "sqlite_fd_guard.h"

#include <sqlite3.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <mutex>

#include <fmt/format.h>

#include "detrace/base/held_fd.h"

namespace detrace::db {
namespace {

struct Entry {
  int fd;
  FdIdentity id;
  std::string path;
  bool lost = false;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;
};

// Never destroyed (SQLite may close files at exit); replaced in a forked child, where a thread
// that is gone may have held the parent's mutex.
std::atomic<Registry*> g_registry{new Registry};
Registry& registry() { return *g_registry.load(std::memory_order_acquire); }

std::atomic<int> g_lost{0};  // entries marked lost and not yet closed by SQLite

// True if `fd` is a lost number: the call through it must fail without reaching the kernel.
bool isLost(int fd) {
  if (g_lost.load(std::memory_order_relaxed) == 0) return false;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  return std::any_of(r.entries.begin(), r.entries.end(),
                     [fd](const Entry& e) { return e.fd == fd && e.lost; });
}

bool lostFd(int fd) {
  if (!isLost(fd)) return false;
  errno = EBADF;
  return true;
}

// The unix VFS's own functions, taken before they are replaced.
using OpenFn = int (*)(const char*, int, int);
using CloseFn = int (*)(int);
using ReadFn = ssize_t (*)(int, void*, size_t);
using PreadFn = ssize_t (*)(int, void*, size_t, off_t);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using PwriteFn = ssize_t (*)(int, const void*, size_t, off_t);
using FtruncateFn = int (*)(int, off_t);
using FcntlFn = int (*)(int, int, ...);
using FstatFn = int (*)(int, struct stat*);
using FchmodFn = int (*)(int, mode_t);
using FchownFn = int (*)(int, uid_t, gid_t);
using MmapFn = void* (*)(void*, size_t, int, int, int, off_t);

OpenFn o_open;
CloseFn o_close;
ReadFn o_read;
PreadFn o_pread, o_pread64;
WriteFn o_write;
PwriteFn o_pwrite, o_pwrite64;
FtruncateFn o_ftruncate;
FcntlFn o_fcntl;
FstatFn o_fstat;
FchmodFn o_fchmod;
FchownFn o_fchown;
MmapFn o_mmap;

void remember(int fd, const char* path) {
  std::optional<FdIdentity> id = fdIdentity(fd);
  if (!id) return;
  try {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    r.entries.push_back(Entry{fd, *id, path != nullptr ? path : ""});
  } catch (...) {  // out of memory: this file goes unguarded
  }
}

// A lost number that a new file landed on: the new file goes elsewhere, the lost number stays
// reserved for SQLite's old handle (whose close must find it lost, not close the new file).
int avoidLostNumber(int fd) {
  if (!isLost(fd)) return fd;
  const int other = fcntl(fd, F_DUPFD_CLOEXEC, std::max(highFdBase(), 3));
  ::close(fd);
  return other;
}

int guardedOpen(const char* path, int flags, int mode) {
  int fd = o_open(path, flags, mode);
  if (fd < 0) return fd;
  fd = avoidLostNumber(moveFdHigh(fd));
  if (fd >= 0) remember(fd, path);
  return fd;
}

int guardedClose(int fd) {
  bool ours = true;
  {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    auto it = std::find_if(r.entries.begin(), r.entries.end(), [fd](const Entry& e) { return e.fd == fd; });
    if (it != r.entries.end()) {
      ours = !it->lost && fdNames(fd, it->id);
      if (it->lost) g_lost.fetch_sub(1, std::memory_order_relaxed);
      r.entries.erase(it);
    }
  }
  if (!ours) return 0;  // not SQLite's file any more: forgotten, never closed
  return o_close(fd);
}

ssize_t guardedRead(int fd, void* buf, size_t n) { return lostFd(fd) ? -1 : o_read(fd, buf, n); }
ssize_t guardedPread(int fd, void* buf, size_t n, off_t off) {
  return lostFd(fd) ? -1 : o_pread(fd, buf, n, off);
}
ssize_t guardedPread64(int fd, void* buf, size_t n, off_t off) {
  return lostFd(fd) ? -1 : o_pread64(fd, buf, n, off);
}
ssize_t guardedWrite(int fd, const void* buf, size_t n) { return lostFd(fd) ? -1 : o_write(fd, buf, n); }
ssize_t guardedPwrite(int fd, const void* buf, size_t n, off_t off) {
  return lostFd(fd) ? -1 : o_pwrite(fd, buf, n, off);
}
ssize_t guardedPwrite64(int fd, const void* buf, size_t n, off_t off) {
  return lostFd(fd) ? -1 : o_pwrite64(fd, buf, n, off);
}
int guardedFtruncate(int fd, off_t size) { return lostFd(fd) ? -1 : o_ftruncate(fd, size); }
int guardedFcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);  // SQLite passes an int or a pointer; either fits
  va_end(ap);
  return lostFd(fd) ? -1 : o_fcntl(fd, cmd, arg);
}
int guardedFstat(int fd, struct stat* st) { return lostFd(fd) ? -1 : o_fstat(fd, st); }
int guardedFchmod(int fd, mode_t mode) { return lostFd(fd) ? -1 : o_fchmod(fd, mode); }
int guardedFchown(int fd, uid_t uid, gid_t gid) { return lostFd(fd) ? -1 : o_fchown(fd, uid, gid); }
void* guardedMmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return lostFd(fd) ? MAP_FAILED : o_mmap(addr, len, prot, flags, fd, off);
}

template <typename Fn>
bool replace(sqlite3_vfs* vfs, const char* name, Fn& original, Fn wrapper) {
  sqlite3_syscall_ptr current = vfs->xGetSystemCall(vfs, name);
  if (current == nullptr) return true;  // not used by this build of SQLite
  original = reinterpret_cast<Fn>(current);
  return vfs->xSetSystemCall(vfs, name, reinterpret_cast<sqlite3_syscall_ptr>(wrapper)) == SQLITE_OK;
}

void forgetAfterFork() {
  g_registry.store(new Registry, std::memory_order_release);  // the parent's is leaked
  g_lost.store(0, std::memory_order_relaxed);
}

void install() {
  if (pthread_atfork(nullptr, nullptr, forgetAfterFork) != 0) return;
  sqlite3_vfs* vfs = sqlite3_vfs_find("unix");
  if (vfs == nullptr || vfs->iVersion < 3 || vfs->xSetSystemCall == nullptr) return;
  // Every call through a descriptor first, open last: no file is opened before its calls are guarded.
  bool ok = replace(vfs, "close", o_close, &guardedClose) && replace(vfs, "read", o_read, &guardedRead) &&
            replace(vfs, "pread", o_pread, &guardedPread) &&
            replace(vfs, "pread64", o_pread64, &guardedPread64) &&
            replace(vfs, "write", o_write, &guardedWrite) &&
            replace(vfs, "pwrite", o_pwrite, &guardedPwrite) &&
            replace(vfs, "pwrite64", o_pwrite64, &guardedPwrite64) &&
            replace(vfs, "ftruncate", o_ftruncate, &guardedFtruncate) &&
            replace(vfs, "fcntl", o_fcntl, &guardedFcntl) && replace(vfs, "fstat", o_fstat, &guardedFstat) &&
            replace(vfs, "fchmod", o_fchmod, &guardedFchmod) &&
            replace(vfs, "fchown", o_fchown, &guardedFchown) && replace(vfs, "mmap", o_mmap, &guardedMmap);
  if (ok) replace(vfs, "open", o_open, &guardedOpen);
}

bool isTraceFile(const std::string& path, const std::string& db_path) {
  if (path == db_path) return true;
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    if (path.size() == db_path.size() + std::char_traits<char>::length(suffix) &&
        path.compare(0, db_path.size(), db_path) == 0 && path.compare(db_path.size(), std::string::npos, suffix) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

void installSqliteFdGuard() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, install);
  } catch (...) {
  }
}

std::vector<LostFd> lostTraceFds(const std::string& db_path) {
  std::vector<LostFd> lost;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  for (Entry& e : r.entries) {
    if (!isTraceFile(e.path, db_path)) continue;
    if (!e.lost && fdNames(e.fd, e.id)) continue;
    if (!e.lost) {
      e.lost = true;
      g_lost.fetch_add(1, std::memory_order_relaxed);
    }
    lost.push_back(LostFd{e.fd, e.path});
  }
  return lost;
}

std::string describeLostFds(const std::vector<LostFd>& lost) {
  if (lost.empty()) return {};
  std::string list;
  for (const LostFd& l : lost) list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", l.fd, l.path);
  return fmt::format(
      "the program closed the trace's file descriptor{} {} (or opened a file of its own in its "
      "place); recording stopped there and detrace will not touch that number again. What was "
      "committed before stays in the file",
      lost.size() == 1 ? "" : "s", list);
}

}  // namespace detrace::db
