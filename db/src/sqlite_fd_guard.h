// The trace files' descriptors, guarded against a program that closes them (private to db/).
//
// SQLite keeps the trace file, its WAL and its shared-memory file open for as long as the writer
// lives. Inside someone else's program those descriptors can be closed under it (a daemon closing
// everything above stderr, close_range, a dup2 onto "a free number"); SQLite's next pwrite through
// the stale number would then land in whatever the program opened there. SQLite's unix VFS lets
// its system calls be replaced (sqlite3_vfs::xSetSystemCall), and this guard does that once:
//  - open() moves each new descriptor high (held_fd.h's moveFdHigh) and remembers what it names;
//  - the writer asks, before each batch and at its close, whether its files' numbers still name
//    them (lostTraceFds); a number that does not is marked lost;
//  - every call SQLite makes through a lost number (read, write, lock, truncate, map, close, ...)
//    fails with EBADF without reaching the kernel, so nothing SQLite does afterwards, its close
//    and checkpoint included, can touch the program's file;
//  - close() closes a number only while it still names SQLite's file.
// The calls SQLite makes through numbers that are not lost cost one relaxed atomic load more.
#pragma once

#include <string>
#include <vector>

namespace detrace::db {

// Replaces the unix VFS's system calls (once per process; later calls do nothing). Call before
// the first sqlite3_open of a file to be guarded.
void installSqliteFdGuard() noexcept;

struct LostFd {
  int fd = -1;
  std::string path;  // the file SQLite opened through it
};

// The descriptors SQLite opened for the database `db_path` (as sqlite3_db_filename gives it), its
// -wal, -shm and -journal that no longer name those files; each is marked lost (see above).
std::vector<LostFd> lostTraceFds(const std::string& db_path);

// "the program closed descriptor 1003 (PATH-wal) ..." for an error message; "" for none.
std::string describeLostFds(const std::vector<LostFd>& lost);

}  // namespace detrace::db
