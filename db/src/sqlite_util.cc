#include "sqlite_util.h"

namespace detrace::db {

Status sqliteStatus(sqlite3* db, int rc, std::string_view what) {
  const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // The file, so that a command reading several (diff's two runs) says which one.
  const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
  const std::string trace = file != nullptr && *file != '\0' ? fmt::format("the trace file {}", file)
                                                             : std::string("the trace file");
  switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
      return Status::ok();
    case SQLITE_CORRUPT:
      return makeError(ErrorCode::kCorrupt,
                       "{} failed: {} is damaged ({}); it may have been truncated or "
                       "overwritten. Re-record the run",
                       what, trace, msg);
    case SQLITE_NOTADB:
      return makeError(ErrorCode::kNotATrace, "{} failed: {} is not a detrace trace ({})", what, trace,
                       msg);
    case SQLITE_FULL:
      return makeError(ErrorCode::kIo, "{} failed: the disk is full ({}); free space and re-record",
                       what, msg);
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return makeError(ErrorCode::kIo, "{} failed ({}): {}", what, trace, msg);
    default:
      return makeError(ErrorCode::kInternal, "{} failed ({}): {} (SQLite code {})", what, trace, msg, rc);
  }
}

Result<StmtHandle> prepare(sqlite3* db, std::string_view sql, bool persistent) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                              persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return sqliteStatus(db, rc, fmt::format("preparing \"{:.60}\"", sql));
  }
  return StmtHandle(stmt);
}

Status exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) return sqliteStatus(db, rc, fmt::format("executing \"{:.60}\"", sql));
  return Status::ok();
}

std::string colText(sqlite3_stmt* s, int i) {
  const unsigned char* text = sqlite3_column_text(s, i);
  if (text == nullptr) return {};
  return {reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(s, i))};
}

}  // namespace detrace::db
