// The trace schema, declared once (db/src/schema.cc) with a line of documentation per column. The
// DDL that creates a trace, the writer's INSERT statements and docs/schema.md are all made from it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace detrace::db {

// Bumped on any incompatible change. Readers refuse other versions with a sentence that says so.
inline constexpr int kSchemaVersion = 1;
// PRAGMA application_id of every detrace trace: "DTRC". Tells a trace from other SQLite files.
inline constexpr int32_t kApplicationId = 0x44545243;
// File name extension of per-rank trace files.
inline constexpr const char* kTraceExtension = ".dtrace";

struct ColumnDef {
  const char* name;
  const char* type;        // SQLite type: INTEGER, TEXT, BLOB
  const char* constraint;  // e.g. "PRIMARY KEY", "NOT NULL", ""
  const char* doc;
  // Added at the end of its table within schema version 1: older files lack it, and the reader
  // reads it as NULL there (any other missing column is damage, and an error).
  bool added_later = false;
};

struct TableDef {
  const char* name;
  const char* doc;
  std::span<const ColumnDef> columns;
  std::span<const char* const> indexes;  // full CREATE INDEX statements
};

// Every table of schema version kSchemaVersion, in creation order.
std::span<const TableDef> schemaTables();
const TableDef& schemaTable(std::string_view name);

// CREATE TABLE / CREATE INDEX statements for a new trace.
std::string schemaDdl();
// "INSERT INTO t (c1, ..., cn) VALUES (?, ..., ?)" for a table, columns in declaration order.
// With rows > 1, one statement inserting that many rows ("VALUES (...), (...)").
std::string insertSql(const TableDef& table, int rows = 1);
// The schema as Markdown (docs/schema.md and `detrace schema`).
std::string schemaMarkdown();

}  // namespace detrace::db
