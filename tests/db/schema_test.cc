#include "detrace/db/schema.h"

#include <sqlite3.h>

#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace detrace::db {
namespace {

TEST(Schema, DdlCreatesEveryTableOnAFreshDatabase) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, schemaDdl().c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  for (const TableDef& t : schemaTables()) {
    sqlite3_stmt* s = nullptr;
    // Every declared column exists, in declaration order.
    ASSERT_EQ(sqlite3_prepare_v2(db, fmt::format("PRAGMA table_info({})", t.name).c_str(), -1, &s,
                                 nullptr),
              SQLITE_OK);
    size_t i = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
      ASSERT_LT(i, t.columns.size()) << t.name;
      EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 1)), t.columns[i].name);
      ++i;
    }
    EXPECT_EQ(i, t.columns.size()) << t.name;
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
}

TEST(Schema, EveryColumnIsDocumentedInTheMarkdown) {
  std::string md = schemaMarkdown();
  for (const TableDef& t : schemaTables()) {
    EXPECT_NE(md.find(fmt::format("## `{}`", t.name)), std::string::npos) << t.name;
    for (const ColumnDef& c : t.columns) {
      EXPECT_GT(std::string_view(c.doc).size(), 5u) << t.name << "." << c.name << " lacks a doc";
      EXPECT_NE(md.find(fmt::format("| `{}` |", c.name)), std::string::npos) << c.name;
    }
  }
}

TEST(Schema, MultiRowInsertHasOneParameterPerColumnPerRow) {
  const TableDef& events = schemaTable("events");
  std::string sql = insertSql(events, 3);
  EXPECT_EQ(static_cast<size_t>(std::count(sql.begin(), sql.end(), '?')), 3 * events.columns.size());
}

}  // namespace
}  // namespace detrace::db
