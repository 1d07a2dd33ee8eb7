// SQLite's descriptors of trace files, guarded against a program that closes them. See
// sqlite_fd_guard.h.
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
#include <iterator>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "detrace/base/held_fd.h"

namespace detrace::db {
namespace {

constexpr int kShadows = 4;

struct Entry {
  int fd;
  FdIdentity id;
  std::string path;
  bool lost = false;
  // Other numbers of the same file, kept open until `fd` is closed: the numbers of lost entries
  // that the kernel gave this file (see unclaimedNumberLocked). Closing them earlier would drop
  // the POSIX locks this process holds on the file.
  int shadows[kShadows] = {-1, -1, -1, -1};
};

struct Trace {
  std::string db;    // as SQLite names it
  int announced = 0;  // writers that announced it and have not forgotten it
};

struct Registry {
  std::mutex mu;
  std::vector<Trace> traces;
  std::vector<Entry> entries;  // descriptors SQLite holds on their files (and files with shadows)
};

// Never destroyed (SQLite may close files at exit); replaced in a forked child, where a thread
// that is gone may have held the parent's mutex.
std::atomic<Registry*> g_registry{new Registry};
Registry& registry() { return *g_registry.load(std::memory_order_acquire); }
// Entries in the registry: while none, calls pass without taking its lock.
std::atomic<int> g_entries{0};

// True if `path` is the database `db` or one of its companions.
bool fileOf(std::string_view path, std::string_view db) {
  if (path.substr(0, db.size()) != db) return false;
  std::string_view rest = path.substr(db.size());
  return rest.empty() || rest == "-wal" || rest == "-shm" || rest == "-journal";
}

bool isTraceFileLocked(const Registry& r, std::string_view path) {
  return std::any_of(r.traces.begin(), r.traces.end(), [&](const Trace& t) { return fileOf(path, t.db); });
}

Entry* findLocked(Registry& r, int fd) {
  auto it = std::find_if(r.entries.begin(), r.entries.end(), [fd](const Entry& e) { return e.fd == fd; });
  return it == r.entries.end() ? nullptr : &*it;
}

// True if `e`'s number no longer names its file (marked lost from then on).
bool lostLocked(Entry& e) {
  if (!e.lost && !fdNames(e.fd, e.id)) e.lost = true;
  return e.lost;
}

// False if `fd` is a trace file's number that no longer names that file (marked lost then): the
// call through it must fail without reaching the kernel. Numbers of other files pass.
bool usable(int fd) {
  if (g_entries.load(std::memory_order_relaxed) == 0) return true;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  Entry* e = findLocked(r, fd);
  return e == nullptr || !lostLocked(*e);
}

bool refuse(int fd) {
  if (usable(fd)) return false;
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
using FallocateFn = int (*)(int, off_t, off_t);
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
FallocateFn o_fallocate;
MmapFn o_mmap;

// A number no entry holds, for a new file's descriptor `fd`. An entry on the number the kernel
// just gave back is stale (its file was closed under SQLite): it is marked lost and keeps the
// number, so that the old handle's calls fail and its close closes nothing; the new file moves
// to another number, and the one it leaves stays open as a shadow (its close could drop locks).
// Returns the number, or -1 (errno set) with every number of the new file closed.
int unclaimedNumberLocked(Registry& r, int fd, int (&shadows)[kShadows], int& n_shadows) {
  while (fd >= 0) {
    Entry* stale = findLocked(r, fd);
    if (stale == nullptr) return fd;
    stale->lost = true;
    const int next = fcntl(fd, F_DUPFD_CLOEXEC, std::max(highFdBase(), 3));
    if (n_shadows < kShadows) {
      shadows[n_shadows++] = fd;
    } else {
      ::close(fd);  // a fifth collision in one open: past any real case
    }
    fd = next;
  }
  const int saved = errno;
  for (int i = 0; i < n_shadows; ++i) ::close(shadows[i]);
  n_shadows = 0;
  errno = saved;
  return -1;
}

// True if another descriptor of ours has the file `id` open (and still names it).
bool openElsewhereLocked(const Registry& r, FdIdentity id) {
  return std::any_of(r.entries.begin(), r.entries.end(),
                     [&](const Entry& e) { return !e.lost && e.id == id && fdNames(e.fd, e.id); });
}

int guardedOpen(const char* path, int flags, int mode) {
  int fd = o_open(path, flags, mode);
  if (fd < 0 || path == nullptr) return fd;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  // Any file, a trace's or not (the program's own, where SQLite is shared with it), that lands on
  // a lost number must leave it.
  const bool trace = isTraceFileLocked(r, path);
  if (!trace && findLocked(r, fd) == nullptr) return fd;
  std::optional<FdIdentity> id = fdIdentity(fd);
  if (!id) return fd;
  int shadows[kShadows] = {-1, -1, -1, -1};
  int n_shadows = 0;
  fd = unclaimedNumberLocked(r, fd, shadows, n_shadows);
  // Moving closes the low number, which drops every POSIX lock this process holds on the file:
  // only a trace file no other descriptor of ours has open is moved.
  if (fd >= 0 && trace && n_shadows == 0 && !openElsewhereLocked(r, *id)) fd = moveFdHigh(fd);
  if (fd >= 0) fd = unclaimedNumberLocked(r, fd, shadows, n_shadows);
  if (fd < 0) return fd;
  try {
    Entry e{fd, *id, path};
    std::copy(std::begin(shadows), std::end(shadows), std::begin(e.shadows));
    r.entries.push_back(std::move(e));
    g_entries.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {  // out of memory: this file goes unguarded (its shadows stay open)
  }
  return fd;
}

int guardedClose(int fd) {
  if (g_entries.load(std::memory_order_relaxed) != 0) {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    if (Entry* e = findLocked(r, fd)) {
      const bool ours = !lostLocked(*e);
      for (int shadow : e->shadows) {
        if (shadow >= 0 && fdNames(shadow, e->id)) ::close(shadow);
      }
      r.entries.erase(r.entries.begin() + (e - r.entries.data()));
      g_entries.fetch_sub(1, std::memory_order_relaxed);
      if (!ours) return 0;  // not the trace's file any more: forgotten, never closed
    }
  }
  return o_close(fd);
}

ssize_t guardedRead(int fd, void* buf, size_t n) { return refuse(fd) ? -1 : o_read(fd, buf, n); }
ssize_t guardedPread(int fd, void* buf, size_t n, off_t off) {
  return refuse(fd) ? -1 : o_pread(fd, buf, n, off);
}
ssize_t guardedPread64(int fd, void* buf, size_t n, off_t off) {
  return refuse(fd) ? -1 : o_pread64(fd, buf, n, off);
}
ssize_t guardedWrite(int fd, const void* buf, size_t n) { return refuse(fd) ? -1 : o_write(fd, buf, n); }
ssize_t guardedPwrite(int fd, const void* buf, size_t n, off_t off) {
  return refuse(fd) ? -1 : o_pwrite(fd, buf, n, off);
}
ssize_t guardedPwrite64(int fd, const void* buf, size_t n, off_t off) {
  return refuse(fd) ? -1 : o_pwrite64(fd, buf, n, off);
}
int guardedFtruncate(int fd, off_t size) { return refuse(fd) ? -1 : o_ftruncate(fd, size); }
int guardedFcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);  // SQLite passes an int or a pointer; either fits, as in glibc
  va_end(ap);
  return refuse(fd) ? -1 : o_fcntl(fd, cmd, arg);
}
int guardedFstat(int fd, struct stat* st) { return refuse(fd) ? -1 : o_fstat(fd, st); }
int guardedFchmod(int fd, mode_t mode) { return refuse(fd) ? -1 : o_fchmod(fd, mode); }
int guardedFchown(int fd, uid_t uid, gid_t gid) { return refuse(fd) ? -1 : o_fchown(fd, uid, gid); }
int guardedFallocate(int fd, off_t off, off_t len) {
  return refuse(fd) ? EBADF : o_fallocate(fd, off, len);  // posix_fallocate returns the error
}
void* guardedMmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return refuse(fd) ? MAP_FAILED : o_mmap(addr, len, prot, flags, fd, off);
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
  g_entries.store(0, std::memory_order_relaxed);
}

void install() {
  if (pthread_atfork(nullptr, nullptr, forgetAfterFork) != 0) return;
  sqlite3_vfs* vfs = sqlite3_vfs_find("unix");
  if (vfs == nullptr || vfs->iVersion < 3 || vfs->xSetSystemCall == nullptr) return;
  // Every call through a descriptor first, open last: no file is opened before its calls are
  // guarded. ioctl (F2FS atomic writes only) is not replaced; this build does not use it.
  bool ok = replace(vfs, "close", o_close, &guardedClose) && replace(vfs, "read", o_read, &guardedRead) &&
            replace(vfs, "pread", o_pread, &guardedPread) &&
            replace(vfs, "pread64", o_pread64, &guardedPread64) &&
            replace(vfs, "write", o_write, &guardedWrite) &&
            replace(vfs, "pwrite", o_pwrite, &guardedPwrite) &&
            replace(vfs, "pwrite64", o_pwrite64, &guardedPwrite64) &&
            replace(vfs, "ftruncate", o_ftruncate, &guardedFtruncate) &&
            replace(vfs, "fcntl", o_fcntl, &guardedFcntl) && replace(vfs, "fstat", o_fstat, &guardedFstat) &&
            replace(vfs, "fchmod", o_fchmod, &guardedFchmod) &&
            replace(vfs, "fchown", o_fchown, &guardedFchown) &&
            replace(vfs, "fallocate", o_fallocate, &guardedFallocate) &&
            replace(vfs, "mmap", o_mmap, &guardedMmap);
  if (ok) replace(vfs, "open", o_open, &guardedOpen);
}

}  // namespace

void installSqliteFdGuard() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, install);
  } catch (...) {
  }
}

bool announceTraceFile(const std::string& db_path) noexcept {
  try {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    auto it = std::find_if(r.traces.begin(), r.traces.end(), [&](const Trace& t) { return t.db == db_path; });
    if (it == r.traces.end()) {
      r.traces.push_back(Trace{db_path, 1});
    } else {
      ++it->announced;
    }
    return true;
  } catch (...) {
    return false;
  }
}

void forgetTraceFile(const std::string& db_path) noexcept {
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  auto it = std::find_if(r.traces.begin(), r.traces.end(), [&](const Trace& t) { return t.db == db_path; });
  if (it != r.traces.end() && --it->announced == 0) r.traces.erase(it);
}

std::vector<LostFd> lostTraceFds(const std::string& db_path) {
  std::vector<LostFd> lost;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  for (Entry& e : r.entries) {
    if (fileOf(e.path, db_path) && lostLocked(e)) lost.push_back(LostFd{e.fd, e.path});
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
