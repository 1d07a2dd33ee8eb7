// collectives.redop_scalar, PreMulSum's scalar: every bit pattern and its absence come back; traces
// written before the column existed still read, as having none; the reduction reads as text.
#include <sqlite3.h>

#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::Rng;
using testing::TempDir;

// PreMulSum all-reduces with these scalars, then one whose scalar is in device memory, a sum and
// an unknown custom operator.
std::vector<Collective> writeCollectives(const std::string& path, const std::vector<uint64_t>& scalars) {
  auto w = TraceWriter::create(path);
  EXPECT_TRUE(w.isOk()) << w.status().message();
  std::vector<Collective> written;
  if (!w.isOk()) return written;
  Event e;
  e.kind = EventKind::kCollective;
  e.name = (*w)->intern("ncclAllReduce");
  auto add = [&](RedOp redop, std::optional<uint64_t> scalar) {
    Collective c;
    c.op = CollOp::kAllReduce;
    c.dtype = DType::kF64;
    c.count = 8;
    c.redop = redop;
    c.has_redop_scalar = scalar.has_value();
    c.redop_scalar = scalar.value_or(0);
    c.comm_seq = static_cast<int64_t>(written.size());
    EXPECT_TRUE((*w)->appendCollective(e, c).has_value());
    written.push_back(c);
  };
  for (uint64_t s : scalars) add(RedOp::kPreMulSum, s);
  add(RedOp::kPreMulSum, std::nullopt);
  add(RedOp::kSum, std::nullopt);
  add(RedOp::kUnknownCustom, std::nullopt);
  EXPECT_TRUE((*w)->close().isOk());
  return written;
}

// Every way the reader gives collectives: by seq, all at once, and a range at a time.
void expectCollectives(const std::string& path, const std::vector<Collective>& expected) {
  testing::expectEveryReadPath(
      path, expected, [](TraceReader& r) { return r.collectives(); },
      [](TraceReader& r, auto fn) { return r.forEachCollective(0, INT64_MAX, fn); },
      [](TraceReader& r, int64_t seq) { return r.collective(seq); });
}

void exec(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
}

TEST(RedOpScalar, EveryBitPatternAndItsAbsenceComeBack) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  std::vector<uint64_t> scalars = {0, ~uint64_t{0}, uint64_t{1} << 63, std::bit_cast<uint64_t>(0.25),
                                   std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN())};
  for (int i = 0; i < 20; ++i) scalars.push_back(rng.u64());
  const std::string path = dir.file("t.dtrace");
  expectCollectives(path, writeCollectives(path, scalars));
}

TEST(RedOpScalar, TracesWrittenBeforeTheColumnReadAsHavingNone) {
  // A trace of this version whose column was removed, with a scalar that would otherwise be found...
  TempDir dir;
  const std::string path = dir.file("old.dtrace");
  std::vector<Collective> expected = writeCollectives(path, {std::bit_cast<uint64_t>(0.5)});
  ASSERT_TRUE(expected[0].has_redop_scalar);  // so the check below can fail
  exec(path, "ALTER TABLE collectives DROP COLUMN redop_scalar");
  for (Collective& c : expected) {
    c.has_redop_scalar = false;
    c.redop_scalar = 0;
  }
  expectCollectives(path, expected);

  // ...and the recorded traces checked into tests/data, written before the column existed.
  int64_t collectives = 0;
  testing::forEachCheckedInTrace([&](const std::string& trace) {
    auto r = TraceReader::open(trace);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    auto all = (*r)->collectives();
    ASSERT_TRUE(all.isOk()) << all.status().message();
    for (const auto& [seq, c] : *all) EXPECT_FALSE(c.has_redop_scalar) << seq;
    if (!all->empty()) {
      EXPECT_TRUE((*r)->collective(all->front().first).isOk());
    }
    collectives += static_cast<int64_t>(all->size());
  });
  EXPECT_GT(collectives, 0);
}

TEST(RedOpScalar, AnyOtherMissingColumnIsStillAnError) {
  TempDir dir;
  const std::string path = dir.file("damaged.dtrace");
  writeCollectives(path, {0});
  exec(path, "ALTER TABLE collectives DROP COLUMN group_id");
  auto r = TraceReader::open(path);  // named when the file opens, as damage
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << r.status().message();
  EXPECT_NE(r.status().message().find("its collectives table lacks the column group_id"), std::string::npos)
      << r.status().message();
}

TEST(RedOpScalar, TheReductionReadsAsText) {
  Collective c;
  c.redop = RedOp::kSum;
  EXPECT_EQ(redOpText(c), "sum");
  c.redop = RedOp::kPreMulSum;
  EXPECT_EQ(redOpText(c), "premulsum(unrecorded scalar)");
  c.has_redop_scalar = true;
  const std::pair<DType, uint64_t> values[] = {
      {DType::kF32, std::bit_cast<uint32_t>(0.25f)}, {DType::kF64, std::bit_cast<uint64_t>(-1.5)},
      {DType::kF16, 0x3400}, {DType::kBF16, 0x3e80}, {DType::kI8, 0xff}, {DType::kI32, 0xfffffffe},
      {DType::kF8E4M3, 0x38}};
  const char* texts[] = {"premulsum(0.25)", "premulsum(-1.5)", "premulsum(0.25)", "premulsum(0.25)",
                         "premulsum(-1)", "premulsum(-2)", "premulsum(0x38)"};
  for (size_t i = 0; i < std::size(values); ++i) {
    c.dtype = values[i].first;
    c.redop_scalar = values[i].second;
    EXPECT_EQ(redOpText(c), texts[i]) << dtypeName(c.dtype);
  }
  c.has_redop_scalar = false;
  c.redop = RedOp::kUnknownCustom;
  EXPECT_EQ(redOpText(c), "unknown custom op");
  c.redop = static_cast<RedOp>(9);  // an old trace's own NCCL number for a custom operator
  EXPECT_EQ(redOpText(c), "unknown(9)");
}

}  // namespace
}  // namespace detrace::db
