// The trace files' descriptors, guarded against a program that closes them (private to db/).
//
// SQLite keeps the trace file, its WAL and its shared-memory file open for as long as the writer
// lives. Inside someone else's program those descriptors can be closed under it (a daemon closing
// everything above stderr, close_range, a dup2 onto "a free number"); SQLite's next pwrite, lock,
// truncate, map or close through the stale number would then act on whatever the program opened
// there. SQLite's unix VFS lets its system calls be replaced (sqlite3_vfs::xSetSystemCall); this
// guard does that once, and acts only on the files of traces announced to it:
//  - open() moves a trace file's new descriptor high (held_fd.h's moveFdHigh) and remembers what
//    it names, unless another descriptor of this process already has the file open: closing the
//    low number would drop that one's POSIX locks;
//  - every call SQLite makes through a remembered number (read, write, lock, truncate, map, stat,
//    close, ...) first asks whether the number still names that file (fstat); once it does not,
//    the number is lost: the call, and every later one through it, fails with EBADF without
//    reaching the kernel, and close() forgets the number instead of closing it;
//  - the writer also asks before each batch (lostTraceFds), to fail with a sentence that says why.
// Other files (the program's own databases, where SQLite is shared with it: a build without
// libsqlite3.a, or a process linking detrace_db) pass straight through, unless one lands on a
// lost number: it is moved off it, the number kept open until the file is closed.
// Not guarded: a trace whose name SQLite gives differently from announceTraceFile's (the writer
// then announces SQLite's name, and only files opened after that, the WAL and -shm, are guarded).
#pragma once

#include <string>
#include <vector>

namespace detrace::db {

// Replaces the unix VFS's system calls (once per process; later calls do nothing). Call before
// the first sqlite3_open of a file to be guarded.
void installSqliteFdGuard() noexcept;

// The database at `db_path` (as SQLite names it: absolute, links resolved), its -wal, -shm and
// -journal are trace files from now on / no longer. Returns false if out of memory.
bool announceTraceFile(const std::string& db_path) noexcept;
void forgetTraceFile(const std::string& db_path) noexcept;

struct LostFd {
  int fd = -1;
  std::string path;  // the file SQLite opened through it
};

// The descriptors of `db_path`'s files that no longer name those files; each is marked lost.
std::vector<LostFd> lostTraceFds(const std::string& db_path);

// "the program closed the trace's file descriptor 4032 (PATH) ..." for an error; "" for none.
std::string describeLostFds(const std::vector<LostFd>& lost);

}  // namespace detrace::db
