// Why a write failed, where the system can tell (private to db/).
//
// SQLite reports a write past the process's file-size limit (EFBIG) only as "disk I/O error" and
// keeps no errno for it, and a stream (the manifest's std::ofstream) keeps none at all. So the
// cause is read from the state the failure left: the limit against the file's size, and the free
// space of its file system.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace detrace::db {

// A sentence naming the cause and what to do ("the file reached the process's file-size limit
// (`ulimit -f`, N bytes); raise the limit and re-record"), or "" when neither applies. `slack`:
// how far past a file's end the failing write may have reached (a page and its WAL frame header).
// `files`: the paths that write could have gone to.
std::string writeFailureCause(std::initializer_list<std::string> files, int64_t slack);

}  // namespace detrace::db
