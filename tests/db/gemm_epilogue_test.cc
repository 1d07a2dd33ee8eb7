// gemms.epilogue, a cuBLASLt matmul's epilogue: every value and its absence come back by every
// read path; traces written before the column existed read as unrecorded; the value reads as text.
#include <sqlite3.h>

#include <set>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::Rng;
using testing::TempDir;

// cublasLtEpilogue_t's values (cublasLt.h, CUDA 13.0).
constexpr int32_t kEpilogues[] = {1, 2, 130, 4, 6, 134, 136, 152, 32, 160, 36, 164, 192, 208, 256, 512};

// A GEMM per epilogue in `values`, each with random shapes so that a column read from the wrong
// place would not pass for the right one.
std::vector<Gemm> writeGemms(const std::string& path, const std::vector<int32_t>& values, Rng& rng) {
  auto w = TraceWriter::create(path);
  EXPECT_TRUE(w.isOk()) << w.status().message();
  std::vector<Gemm> written;
  if (!w.isOk()) return written;
  Event e;
  e.kind = EventKind::kGemm;
  e.name = (*w)->intern("cublasLtMatmul");
  for (int32_t v : values) {
    Gemm g;
    g.api = e.name;
    g.m = rng.range(1, 4096);
    g.n = rng.range(1, 4096);
    g.k = rng.range(1, 4096);
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = DType::kBF16;
    g.algo_id = static_cast<int32_t>(rng.range(0, 99));
    g.d_addr = static_cast<int64_t>(rng.u64() >> 1);
    g.epilogue = v;
    EXPECT_TRUE((*w)->appendGemm(e, g).has_value());
    written.push_back(g);
  }
  EXPECT_TRUE((*w)->close().isOk());
  return written;
}

void expectGemms(const std::string& path, const std::vector<Gemm>& expected) {
  testing::expectEveryReadPath(
      path, expected, [](TraceReader& r) { return r.gemms(); },
      [](TraceReader& r, auto fn) { return r.forEachGemm(0, INT64_MAX, fn); },
      [](TraceReader& r, int64_t seq) { return r.gemm(seq); });
}

TEST(GemmEpilogue, EveryValueAndItsAbsenceComeBack) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  std::vector<int32_t> values(std::begin(kEpilogues), std::end(kEpilogues));
  values.push_back(static_cast<int32_t>(kUnset));
  values.push_back(1 << 20);  // a value newer than this detrace
  for (int i = 0; i < 8; ++i) values.push_back(kEpilogues[static_cast<size_t>(rng.range(0, static_cast<int64_t>(std::size(kEpilogues)) - 1))]);
  const std::string path = dir.file("t.dtrace");
  expectGemms(path, writeGemms(path, values, rng));
}

TEST(GemmEpilogue, TracesWrittenBeforeTheColumnReadAsUnrecorded) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  const std::string path = dir.file("old.dtrace");
  std::vector<Gemm> expected = writeGemms(path, {4, 36}, rng);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "ALTER TABLE gemms DROP COLUMN epilogue", nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  for (Gemm& g : expected) g.epilogue = static_cast<int32_t>(kUnset);
  expectGemms(path, expected);

  // The recorded traces checked into tests/data were written before the column existed.
  int64_t gemms = 0;
  const int files = testing::forEachCheckedInTrace([&](const std::string& trace) {
    auto r = TraceReader::open(trace);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    auto all = (*r)->gemms();
    ASSERT_TRUE(all.isOk()) << all.status().message();
    for (const auto& [seq, g] : *all) EXPECT_EQ(g.epilogue, kUnset) << seq;
    gemms += static_cast<int64_t>(all->size());
  });
  EXPECT_GT(files, 0);
  EXPECT_GT(gemms, 0);
}

TEST(GemmEpilogue, ReadsAsCublasLtNamesIt) {
  EXPECT_EQ(epilogueText(1), "default");
  EXPECT_EQ(epilogueText(4), "bias");
  EXPECT_EQ(epilogueText(36), "gelu_bias");
  EXPECT_EQ(epilogueText(134), "relu_aux_bias");
  EXPECT_EQ(epilogueText(208), "dgelu_bgrad");
  EXPECT_EQ(epilogueText(512), "bgradb");
  EXPECT_EQ(epilogueText(static_cast<int32_t>(kUnset)), "unrecorded");
  EXPECT_EQ(epilogueText(1 << 20), "1048576");
  std::set<std::string> names;  // every known value has a name of its own
  for (int32_t v : kEpilogues) {
    const std::string t = epilogueText(v);
    EXPECT_NE(t, std::to_string(v)) << "a known value reads as its name";
    names.insert(t);
  }
  EXPECT_EQ(names.size(), std::size(kEpilogues));
}

}  // namespace
}  // namespace detrace::db
