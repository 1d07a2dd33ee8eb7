// Owners and checked calls for SQLite handles (private to db/). Every failing call becomes a
// Status naming the call, with SQLite's own message and an error code a user can act on.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "detrace/base/scoped.h"
#include "detrace/base/status.h"

namespace detrace::db {

inline void closeDb(sqlite3* db) { sqlite3_close_v2(db); }
inline void finalizeStmt(sqlite3_stmt* stmt) { sqlite3_finalize(stmt); }
using DbHandle = ScopedResource<sqlite3*, closeDb>;
using StmtHandle = ScopedResource<sqlite3_stmt*, finalizeStmt>;

// Maps an SQLite result code to a Status: SQLITE_CORRUPT -> kCorrupt, SQLITE_NOTADB -> kNotATrace,
// SQLITE_FULL / SQLITE_IOERR -> kIo, ... `what` names the call that failed.
Status sqliteStatus(sqlite3* db, int rc, std::string_view what);

Result<StmtHandle> prepare(sqlite3* db, std::string_view sql, bool persistent = false);
Status exec(sqlite3* db, const std::string& sql);

// Binds helpers: kUnknown (-1) sentinel values become NULL.
inline void bindInt(sqlite3_stmt* s, int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
inline void bindOpt(sqlite3_stmt* s, int i, int64_t v) {
  if (v == -1) {
    sqlite3_bind_null(s, i);
  } else {
    sqlite3_bind_int64(s, i, v);
  }
}
inline void bindText(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
inline void bindBlob(sqlite3_stmt* s, int i, const void* data, size_t size) {
  if (size == 0) {
    sqlite3_bind_null(s, i);
  } else {
    sqlite3_bind_blob64(s, i, data, size, SQLITE_TRANSIENT);
  }
}

// Column getters: NULL becomes -1 (the kUnknown sentinel).
inline int64_t colOpt(sqlite3_stmt* s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, i);
}
inline int32_t colOpt32(sqlite3_stmt* s, int i) { return static_cast<int32_t>(colOpt(s, i)); }
std::string colText(sqlite3_stmt* s, int i);

}  // namespace detrace::db
