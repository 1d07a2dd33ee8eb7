// launch_params: what the writer stores comes back unchanged, in sequence order; drops are counted;
// traces written before the table existed read as having none.
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::Rng;
using testing::TempDir;

LaunchParams randomParams(Rng& rng, int64_t seq) {
  LaunchParams p;
  p.seq = seq;
  int64_t n = rng.range(0, 12);
  p.layout = "[";
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t size = int64_t{1} << rng.range(0, 5);
    offset = (offset + size - 1) / size * size;
    p.layout += fmt::format("{}[{},{}]", i ? "," : "", offset, size);
    offset += size;
  }
  p.layout += "]";
  p.bytes.resize(static_cast<size_t>(rng.range(0, 1) ? offset : rng.range(0, 4096)));
  for (auto& b : p.bytes) b = static_cast<uint8_t>(rng.range(0, 255));
  return p;
}

std::unique_ptr<TraceWriter> makeWriter(const std::string& path, OverflowPolicy policy) {
  WriterOptions o;
  o.policy = policy;
  o.batch_events = 61;  // several batches
  auto w = TraceWriter::create(path, o);
  EXPECT_TRUE(w.isOk()) << w.status().message();
  return w.isOk() ? std::move(*w) : nullptr;
}

std::vector<LaunchParams> readAllParams(TraceReader& r) {
  std::vector<LaunchParams> out;
  Status st = r.forEachLaunchParams([&](const LaunchParams& p) {
    out.push_back(p);
    return Status::ok();
  });
  EXPECT_TRUE(st.isOk()) << st.message();
  return out;
}

TEST(LaunchParams, RoundTripInAnyAppendOrderReadsBackBySeq) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  std::string path = dir.file("deep.dtrace");
  auto w = makeWriter(path, OverflowPolicy::kBlock);
  ASSERT_TRUE(w);
  int64_t name = w->intern("deep_kernel");
  const int64_t n = rng.range(200, 600);
  std::vector<LaunchParams> pending;
  std::map<int64_t, LaunchParams> expected;
  for (int64_t i = 0; i < n; ++i) {
    auto seq = w->append(testing::randomKernel(rng, name, -1));
    ASSERT_TRUE(seq.has_value());
    if (rng.range(0, 2) == 0) continue;  // not every launch is in the deep window
    pending.push_back(randomParams(rng, *seq));
    expected[*seq] = pending.back();
    // Appended out of order, some after later events: the table is ordered by seq, not arrival.
    if (rng.range(0, 3) == 0) {
      std::shuffle(pending.begin(), pending.end(), rng.gen());
      for (auto& p : pending) EXPECT_TRUE(w->appendLaunchParams(std::move(p)));
      pending.clear();
    }
  }
  for (auto& p : pending) EXPECT_TRUE(w->appendLaunchParams(std::move(p)));
  ASSERT_TRUE(w->close().isOk());
  EXPECT_EQ(w->counters().launch_params_written, static_cast<int64_t>(expected.size()));

  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  for (int64_t seq = 0; seq < n; ++seq) {
    auto got = (*r)->launchParams(seq);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    auto it = expected.find(seq);
    if (it == expected.end()) {
      EXPECT_FALSE(got->has_value()) << seq;
    } else {
      ASSERT_TRUE(got->has_value()) << seq;
      EXPECT_EQ(**got, it->second) << seq;
    }
  }
  std::vector<LaunchParams> all = readAllParams(**r);
  ASSERT_EQ(all.size(), expected.size());
  size_t i = 0;
  for (const auto& [seq, p] : expected) EXPECT_EQ(all[i++], p) << seq;
  EXPECT_EQ((*r)->stats()->at("launch_params_written"), static_cast<int64_t>(expected.size()));
}

TEST(LaunchParams, ASecondRecordForASeqReplacesTheFirstAndUnsetSeqIsRefused) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  std::string path = dir.file("dup.dtrace");
  auto w = makeWriter(path, OverflowPolicy::kBlock);
  ASSERT_TRUE(w);
  auto seq = w->append(testing::randomKernel(rng, w->intern("k"), -1));
  ASSERT_TRUE(seq.has_value());
  LaunchParams first = randomParams(rng, *seq), second = randomParams(rng, *seq);
  second.bytes.push_back(7);  // differs from `first` whatever the draw
  EXPECT_TRUE(w->appendLaunchParams(first));
  ASSERT_TRUE(w->flush().isOk());  // in separate batches too
  EXPECT_TRUE(w->appendLaunchParams(second));
  EXPECT_FALSE(w->appendLaunchParams(randomParams(rng, kUnset)));
  ASSERT_TRUE(w->close().isOk()) << w->status().message();
  EXPECT_EQ(w->counters().launch_params_dropped, 1);

  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk());
  auto got = (*r)->launchParams(*seq);
  ASSERT_TRUE(got.isOk() && got->has_value());
  EXPECT_EQ(**got, second);
  EXPECT_EQ(readAllParams(**r).size(), 1u);
  EXPECT_EQ((*r)->stats()->at("launch_params_dropped"), 1);
}

TEST(LaunchParams, AFullQueueDropsAndCountsWithoutBlocking) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  std::string path = dir.file("drop.dtrace");
  WriterOptions o;
  o.policy = OverflowPolicy::kDrop;
  o.cold_bytes_capacity = 32 << 10;  // a handful of 4-8 KiB records
  auto w = TraceWriter::create(path, o);
  ASSERT_TRUE(w.isOk());
  std::map<int64_t, LaunchParams> kept;
  int64_t dropped = 0;
  for (int64_t seq = 0; seq < 2000; ++seq) {
    LaunchParams p = randomParams(rng, seq);
    p.bytes.resize(static_cast<size_t>(rng.range(4096, 8192)), 0x5a);
    if ((*w)->appendLaunchParams(p)) {
      kept[seq] = std::move(p);
    } else {
      ++dropped;
    }
  }
  ASSERT_TRUE((*w)->close().isOk());
  EXPECT_GT(dropped, 0) << "a 32 KiB queue never overflowed";
  EXPECT_EQ((*w)->counters().launch_params_dropped, dropped);
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk());
  std::vector<LaunchParams> all = readAllParams(**r);
  ASSERT_EQ(all.size(), kept.size());
  size_t i = 0;
  for (const auto& [seq, p] : kept) EXPECT_EQ(all[i++], p) << seq;
  EXPECT_EQ((*r)->stats()->at("launch_params_dropped"), dropped);
}

TEST(LaunchParams, AnErrorFromTheCallbackStopsTheScan) {
  TempDir dir;
  Rng rng;
  std::string path = dir.file("stop.dtrace");
  auto w = makeWriter(path, OverflowPolicy::kBlock);
  ASSERT_TRUE(w);
  for (int64_t seq = 0; seq < 10; ++seq) EXPECT_TRUE(w->appendLaunchParams(randomParams(rng, seq)));
  ASSERT_TRUE(w->close().isOk());
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk());
  int calls = 0;
  Status st = (*r)->forEachLaunchParams([&](const LaunchParams& p) {
    ++calls;
    return p.seq == 3 ? makeError(ErrorCode::kInternal, "stop at {}", p.seq) : Status::ok();
  });
  EXPECT_EQ(st.code(), ErrorCode::kInternal);
  EXPECT_EQ(calls, 4);
}

void expectNoLaunchParams(const std::string& path) {
  SCOPED_TRACE(path);
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto n = (*r)->eventCount();
  ASSERT_TRUE(n.isOk());
  for (int64_t seq : {int64_t{0}, *n / 2, *n - 1}) {
    auto got = (*r)->launchParams(seq);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    EXPECT_FALSE(got->has_value());
  }
  int calls = 0;
  EXPECT_TRUE((*r)->forEachLaunchParams([&](const LaunchParams&) {
    ++calls;
    return Status::ok();
  }).isOk());
  EXPECT_EQ(calls, 0);
}

TEST(LaunchParams, TracesWithoutTheTableReadAsHavingNone) {
  // A trace of this version whose table was removed, with rows that would otherwise be found...
  TempDir dir;
  Rng rng;
  std::string path = dir.file("old.dtrace");
  auto w = makeWriter(path, OverflowPolicy::kBlock);
  ASSERT_TRUE(w);
  int64_t name = w->intern("k");
  for (int64_t i = 0; i < 5; ++i) {
    auto seq = w->append(testing::randomKernel(rng, name, -1));
    ASSERT_TRUE(seq.has_value());
    EXPECT_TRUE(w->appendLaunchParams(randomParams(rng, *seq)));
  }
  ASSERT_TRUE(w->close().isOk());
  {
    auto before = TraceReader::open(path);
    ASSERT_TRUE(before.isOk());
    EXPECT_EQ(readAllParams(**before).size(), 5u);  // so the check below can fail
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "DROP TABLE launch_params", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  expectNoLaunchParams(path);

  // ...and the recorded traces checked into tests/data, written before the table existed.
  EXPECT_GT(testing::forEachCheckedInTrace([](const std::string& trace) { expectNoLaunchParams(trace); }), 0);
}

}  // namespace
}  // namespace detrace::db
