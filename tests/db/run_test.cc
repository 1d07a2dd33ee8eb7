// A run directory: one file per rank plus a manifest, read as one run.
#include <fstream>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::TempDir;

void writeRank(const std::string& path, int32_t rank, int32_t world, int64_t events) {
  auto w = TraceWriter::create(path);
  ASSERT_TRUE(w.isOk());
  if (rank >= 0) (*w)->setRank({rank, world, rank, rank, 1000 + rank, "host", "GPU", ""});
  int64_t id = (*w)->intern("k");
  testing::Rng rng;
  for (int64_t i = 0; i < events; ++i) (void)(*w)->append(testing::randomKernel(rng, id, -1));
  ASSERT_TRUE((*w)->close().isOk());
}

TEST(RunDir, RanksSortedManifestReadAndEachRankOpens) {
  TempDir dir;
  // Files named by pid, not rank, as the tracer names them.
  writeRank(dir.file("proc-300.dtrace"), 2, 4, 30);
  writeRank(dir.file("proc-100.dtrace"), 0, 4, 10);
  writeRank(dir.file("proc-200.dtrace"), 1, 4, 20);
  writeRank(dir.file("proc-400.dtrace"), 3, 4, 40);
  RunManifest m;
  m.tool_version = "0.1.0";
  m.command = {"python", "serve.py", "--tp", "4"};
  m.start_time_ns = 123;
  m.exit_code = 0;
  m.env = {{"NCCL_ALGO", "Ring"}};
  ASSERT_TRUE(writeManifest(dir.path().string(), m).isOk());

  auto run = Run::open(dir.path().string());
  ASSERT_TRUE(run.isOk()) << run.status().message();
  EXPECT_TRUE(run->hasManifest());
  EXPECT_EQ(run->manifest().command, m.command);
  EXPECT_EQ(run->manifest().env.at("NCCL_ALGO"), "Ring");
  ASSERT_EQ(run->ranks().size(), 4u);
  EXPECT_EQ(run->worldSize(), 4);
  EXPECT_TRUE(run->missingRanks().empty());
  for (int32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(run->ranks()[static_cast<size_t>(r)].rank, r);
    auto reader = run->openRank(r);
    ASSERT_TRUE(reader.isOk());
    EXPECT_EQ(*(*reader)->eventCount(), 10 * (r + 1));
  }
  EXPECT_EQ(run->openRank(7).status().code(), ErrorCode::kNotFound);
}

TEST(RunDir, MissingRanksAreReportedNotFatal) {
  TempDir dir;
  writeRank(dir.file("a.dtrace"), 0, 4, 5);
  writeRank(dir.file("b.dtrace"), 2, 4, 5);
  auto run = Run::open(dir.path().string());
  ASSERT_TRUE(run.isOk()) << run.status().message();
  EXPECT_EQ(run->missingRanks(), (std::vector<int32_t>{1, 3}));
}

TEST(RunDir, DuplicateRanksMeanMixedRuns) {
  TempDir dir;
  writeRank(dir.file("a.dtrace"), 1, 2, 5);
  writeRank(dir.file("b.dtrace"), 1, 2, 5);
  auto run = Run::open(dir.path().string());
  EXPECT_EQ(run.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("mixes runs"), std::string::npos);
}

// torchrun's agent (or a shell) runs under the preload too: a file with no rank, no device and no
// events is not a rank. Alone in a run it still opens as rank 0.
TEST(RunDir, ProcessesWithoutGpuWorkAreNotRanks) {
  TempDir dir;
  writeRank(dir.file("a.dtrace"), 0, 2, 5);
  writeRank(dir.file("b.dtrace"), 1, 2, 6);
  writeRank(dir.file("agent.dtrace"), -1, -1, 0);
  writeRank(dir.file("helper.dtrace"), -1, -1, 3);  // did GPU work without NCCL: kept
  auto run = Run::open(dir.path().string());
  ASSERT_TRUE(run.isOk()) << run.status().message();
  ASSERT_EQ(run->ranks().size(), 3u);
  EXPECT_EQ(run->worldSize(), 3);
  EXPECT_EQ(run->ranks()[2].path, dir.file("helper.dtrace"));
  ASSERT_EQ(run->idleFiles().size(), 1u);
  EXPECT_EQ(run->idleFiles()[0], dir.file("agent.dtrace"));
  EXPECT_FALSE(run->noGpuWork());

  TempDir only;
  writeRank(only.file("agent.dtrace"), -1, -1, 0);
  writeRank(only.file("shell.dtrace"), -1, -1, 0);
  auto idle = Run::open(only.path().string());
  ASSERT_TRUE(idle.isOk()) << idle.status().message();
  ASSERT_EQ(idle->ranks().size(), 1u);
  EXPECT_EQ(idle->ranks()[0].rank, 0);
  EXPECT_EQ(idle->idleFiles().size(), 1u);
  EXPECT_TRUE(idle->noGpuWork()) << "a run of nothing but idle files did no GPU work";

  TempDir single;  // one file, of a process that did no GPU work
  writeRank(single.file("proc-9.dtrace"), -1, -1, 0);
  auto one = Run::open(single.path().string());
  ASSERT_TRUE(one.isOk()) << one.status().message();
  EXPECT_TRUE(one->noGpuWork());
  TempDir worked;  // one file with events, no rank: GPU work without NCCL
  writeRank(worked.file("proc-9.dtrace"), -1, -1, 2);
  auto busy = Run::open(worked.path().string());
  ASSERT_TRUE(busy.isOk()) << busy.status().message();
  EXPECT_FALSE(busy->noGpuWork());
}

// A process killed while it created its trace leaves an empty file; a full disk, one cut short.
// The run is still read, those files left out with a warning naming each; a run of nothing but
// such files, or a single one, is an error as before.
TEST(RunDir, FilesThatCannotBeReadAreLeftOutOfARunOfSeveral) {
  TempDir dir;
  writeRank(dir.file("proc-100.dtrace"), 0, 2, 7);
  writeRank(dir.file("proc-200.dtrace"), 1, 2, 9);
  { std::ofstream empty(dir.file("proc-300.dtrace")); }
  { std::ofstream cut(dir.file("proc-400.dtrace"), std::ios::binary); cut << std::string("SQLite format 3\0", 16) << std::string(40, 'x'); }
  auto run = Run::open(dir.path().string());
  ASSERT_TRUE(run.isOk()) << run.status().message();
  ASSERT_EQ(run->ranks().size(), 2u);
  EXPECT_EQ(*(*run->openRank(1))->eventCount(), 9);
  EXPECT_EQ(run->unreadableFiles(),
            (std::vector<std::string>{dir.file("proc-300.dtrace"), dir.file("proc-400.dtrace")}));
  ASSERT_EQ(run->warnings().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(run->warnings()[i].find(run->unreadableFiles()[i]), std::string::npos) << run->warnings()[i];
    EXPECT_NE(run->warnings()[i].find("left out"), std::string::npos) << run->warnings()[i];
  }
  EXPECT_TRUE(run->missingRanks().empty());

  TempDir bad;
  { std::ofstream empty(bad.file("proc-1.dtrace")); }
  { std::ofstream empty(bad.file("proc-2.dtrace")); }
  auto none = Run::open(bad.path().string());
  EXPECT_FALSE(none.isOk()) << "no file readable: the first one's error";
  EXPECT_NE(none.status().message().find("proc-1.dtrace"), std::string::npos) << none.status().message();
  auto one = Run::open(bad.file("proc-1.dtrace"));
  EXPECT_FALSE(one.isOk());
  writeRank(bad.file("proc-3.dtrace"), -1, -1, 0);  // an idle launcher beside them: still no run
  EXPECT_FALSE(Run::open(bad.path().string()).isOk());

  // What holds data, or is not the run's, is never left out: a foreign SQLite file, a random one.
  for (const std::string& stranger : {std::string("foreign"), std::string("random")}) {
    TempDir mixed;
    writeRank(mixed.file("proc-100.dtrace"), 0, 1, 3);
    if (stranger == "foreign") {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open(mixed.file("proc-200.dtrace").c_str(), &db), SQLITE_OK);
      ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr), SQLITE_OK);
      sqlite3_close(db);
    } else {
      std::ofstream(mixed.file("proc-200.dtrace"), std::ios::binary) << std::string(4096, '\x5a');
    }
    auto opened = Run::open(mixed.path().string());
    EXPECT_FALSE(opened.isOk()) << stranger;
    EXPECT_EQ(opened.status().code(), ErrorCode::kNotATrace) << opened.status().message();
  }
}

// A manifest that cannot be written says why: its directory gone (was: "is the disk full?"), or
// a directory of a filesystem that takes no files (/proc: was "the disk is full").
TEST(RunDir, AManifestThatCannotBeWrittenSaysWhy) {
  RunManifest m;
  m.tool_version = "0.1.0";
  std::string gone;
  {
    TempDir dir;
    gone = dir.file("run");
  }
  Status st = writeManifest(gone, m);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("the run directory " + gone + " no longer exists"), std::string::npos) << st.message();
  Status proc = writeManifest("/proc", m);
  ASSERT_FALSE(proc.isOk());
  EXPECT_EQ(proc.message().find("disk"), std::string::npos) << proc.message();
}

TEST(RunDir, SingleFileAndUnrankedProcess) {
  TempDir dir;
  writeRank(dir.file("solo.dtrace"), -1, -1, 7);
  auto run = Run::open(dir.file("solo.dtrace"));
  ASSERT_TRUE(run.isOk()) << run.status().message();
  ASSERT_EQ(run->ranks().size(), 1u);
  EXPECT_EQ(run->ranks()[0].rank, 0);
  EXPECT_TRUE(run->warnings().empty());
  auto reader = run->openRank(0);
  ASSERT_TRUE(reader.isOk());
  EXPECT_EQ(*(*reader)->eventCount(), 7);
}

}  // namespace
}  // namespace detrace::db
