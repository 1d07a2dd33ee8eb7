// Binding records to INSERT statements and reading them back from SELECT rows. Both sides follow
// the column order declared in schema.cc; the round-trip tests (tests/db) check every field.
#pragma once

#include <sqlite3.h>

#include <array>
#include <string>

#include "detrace/base/status.h"
#include "detrace/db/records.h"

namespace detrace::db {

// Column lists in declaration order, for SELECTs.
std::string columnList(std::string_view table, std::string_view prefix = "");

// Binds an event's columns at parameters base+1 .. base+kEventColumns.
void bindEvent(sqlite3_stmt* s, const Event& e, int base = 0);
inline constexpr int kEventColumns = 18;
// Launch dimensions are packed into one column each (schema.cc documents the layout).
int64_t packGrid(const std::array<int32_t, 3>& grid);
std::array<int32_t, 3> unpackGrid(int64_t packed);
int64_t packBlock(const std::array<int32_t, 3>& block);
std::array<int32_t, 3> unpackBlock(int64_t packed);
void bindCollective(sqlite3_stmt* s, int64_t seq, const Collective& c);
void bindGemm(sqlite3_stmt* s, int64_t seq, const Gemm& g);
void bindMarker(sqlite3_stmt* s, int64_t seq, const Marker& m);
void bindStream(sqlite3_stmt* s, const StreamInfo& st);
void bindRank(sqlite3_stmt* s, const RankInfo& r);
// Binds everything but `capture`, which the caller binds (compressed) at column `kCaptureColumn`.
void bindOperandFields(sqlite3_stmt* s, const Operand& o);
inline constexpr int kOperandCaptureColumn = 16;  // 1-based bind index of operands.capture (last)

void bindLaunchParams(sqlite3_stmt* s, const LaunchParams& p);
void bindGraphOp(sqlite3_stmt* s, const GraphOp& g);

// Reads a row whose columns start at `first` in declaration order.
Event readEvent(sqlite3_stmt* s, int first = 0);
Collective readCollective(sqlite3_stmt* s, int first);  // first = index of the `op` column
Gemm readGemm(sqlite3_stmt* s, int first);              // first = index of the `api` column
Marker readMarker(sqlite3_stmt* s, int first);          // first = index of `marker_kind`
StreamInfo readStream(sqlite3_stmt* s);
RankInfo readRank(sqlite3_stmt* s);
LaunchParams readLaunchParams(sqlite3_stmt* s);  // all columns, seq first
GraphOp readGraphOp(sqlite3_stmt* s);            // all columns, seq first
// Reads the operand columns before `capture` (select them with operandFieldList()).
std::string operandFieldList();
Result<Operand> readOperandFields(sqlite3_stmt* s);

// Little-endian encoding of per-row digests.
std::string encodeDigests(const std::vector<uint64_t>& digests);
std::vector<uint64_t> decodeDigests(const void* data, size_t bytes);
// An operand's row digests as read from a file: one per row (`rows`; any whole number of them
// where `rows` is 0), or none where the operand has no rows or no digest at all. Any other length is damage (a cut or edited blob), kCorrupt: read
// short, the rows would compare as if absent and a batch diff would call the op identical.
Result<std::vector<uint64_t>> decodeRowDigests(const void* data, size_t bytes, int64_t rows,
                                               bool has_digest, int64_t seq, int32_t slot);
std::string encodeShape(const std::vector<int64_t>& shape);
Result<std::vector<int64_t>> decodeShape(std::string_view text);

}  // namespace detrace::db
