// `detrace record` when the trace cannot be written to the end: the process's file-size limit
// (`ulimit -f`) and a full disk (a 2 MiB tmpfs in a private mount namespace). The recorded program
// must run to its end, unharmed: a write past the file-size limit raises SIGXFSZ, whose default
// action would end it. The log says why recording stopped, the file keeps every call committed
// before, in order, and `detrace record` and `detrace info` say the file was not finished.
//
// The program is control_app (a fake-NCCL rank, no CUDA): "call N" makes one all-reduce of N
// elements. The calls come in bursts of 2000, 0.1 s apart, so that commits happen between them:
// without CUDA no flusher thread commits while the program runs (the ring filling moves events on).
#include <filesystem>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../db/test_util.h"
#include "common/shell.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"

namespace detrace {
namespace {

using testing::TempDir;
using Output = testing::ShellOutput;

constexpr int kCalls = 20000;

std::string detrace() { return testing::detraceExe(); }
std::string app() { return fmt::format("{}/tests/control_app", DETRACE_BINARY_DIR); }

// A shell pipeline that feeds kCalls "call N" lines to `recorder` (a command line ending in `--`).
std::string callBursts(const std::string& recorder) {
  return fmt::format("i=0; while [ $i -lt {} ]; do i=$((i+1)); echo \"call $i\"; "
                     "[ $((i % 2000)) -eq 0 ] && sleep 0.1; done | {} {}",
                     kCalls, recorder, app());
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// What every case expects of the program and of the log.
void expectProgramUnharmed(const Output& o, const char* cause) {
  const std::string head = o.out.substr(0, 2000);
  EXPECT_EQ(o.status, 0) << head;
  EXPECT_EQ(count(o.out, "ok\n"), static_cast<size_t>(kCalls)) << "the program did not make all its calls";
  EXPECT_NE(o.out.find("recording stopped: the trace could not be written"), std::string::npos) << head;
  EXPECT_NE(o.out.find(cause), std::string::npos) << head;
  EXPECT_NE(o.out.find("1 not finished"), std::string::npos) << head;
}

// The trace in `run` holds calls 1..k in order, for some 0 < k < kCalls, and reads as unfinished.
void expectCommittedCallsInOrder(const std::string& run) {
  auto r = db::Run::open(run);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(r->ranks().size(), 1u);
  EXPECT_EQ(r->unfinishedFiles().size(), 1u);
  auto reader = r->openRank(r->ranks()[0].rank);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_FALSE((*reader)->finished());
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk()) << colls.status().message();
  ASSERT_GT(colls->size(), 0u) << "nothing was committed before the trace stopped";
  EXPECT_LT(colls->size(), static_cast<size_t>(kCalls)) << "the trace never stopped";
  for (size_t i = 0; i < colls->size(); ++i) {
    ASSERT_EQ((*colls)[i].second.count, static_cast<int64_t>(i + 1)) << "call " << i + 1 << " missing or out of order";
  }
}

TEST(WriteFailure, ATraceOverTheFileSizeLimitStopsTheRecordingNotTheProgram) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  // sh's `ulimit -f` counts 512-byte blocks: 2 MiB, about 8000 of the 20000 calls. (1 MiB, about
  // 4000, failed 1 run in 10 to 20 on a loaded machine: the first commit, 100 ms in, came too late.)
  Output o = testing::runShell(callBursts(fmt::format("(ulimit -f 4096; {} record -o {} --", detrace(), run)) + ")");
  expectProgramUnharmed(o, "file-size limit");
  Output info = testing::runShell(fmt::format("{} info {}", detrace(), run));
  EXPECT_EQ(info.status, 0) << info.out;
  EXPECT_NE(info.out.find("was not finished"), std::string::npos) << info.out;
  expectCommittedCallsInOrder(run);
}

// A limit too small for the trace's first page: the tracer cannot record the process at all and
// says so; the program runs on unrecorded and is not ended by SIGXFSZ.
TEST(WriteFailure, AFileSizeLimitTooSmallForATraceLeavesTheProgramUnrecordedNotEnded) {
  TempDir tmp;
  Output o = testing::runShell(fmt::format("printf 'call 1\\ncall 2\\n' | (ulimit -f 128; {} record -o {} -- {})",
                                           detrace(), tmp.file("run"), app()));  // 64 KiB
  EXPECT_EQ(o.status, 0) << o.out;
  // Both calls answered; the tracer's line (from its writer's thread) may come between them.
  std::istringstream lines(o.out);
  int oks = 0;
  for (std::string line; std::getline(lines, line);) oks += line == "ok" ? 1 : 0;
  EXPECT_EQ(oks, 2) << o.out;
  EXPECT_NE(o.out.find("cannot record this process"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("file-size limit"), std::string::npos) << o.out;
}

// A real full disk (ENOSPC): a 2 MiB tmpfs mounted in a private mount namespace (`unshare -rm`),
// which goes away with the shell, so the run is copied out before. About 12000 of the 20000 calls
// fit (1 MiB held the first 4000 only, and a first commit delayed on a loaded machine found it
// full already). Skipped where this machine does not allow user namespaces.
TEST(WriteFailure, AFullDiskStopsTheRecordingNotTheProgram) {
  if (testing::runShell("unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs /mnt'").status != 0) {
    GTEST_SKIP() << "no private mount namespace here (unshare -rm with a tmpfs mount failed)";
  }
  TempDir tmp;
  const std::string disk = tmp.file("disk"), copy = tmp.file("copy");
  std::filesystem::create_directories(disk);
  std::filesystem::create_directories(copy);
  const std::string pipeline = callBursts(fmt::format("{} record -o {}/run --", detrace(), disk));
  Output o = testing::runShell(fmt::format(
      "unshare -rm sh -c 'mount -t tmpfs -o size=2m tmpfs {} && {{ {}; }}; rc=$?; cp {}/run/proc-* {}/; exit $rc'",
      disk, pipeline, disk, copy));
  expectProgramUnharmed(o, "the disk is full");
  EXPECT_NE(o.out.find("the manifest keeps the start's values"), std::string::npos) << o.out.substr(0, 2000);
  expectCommittedCallsInOrder(copy);
}

// `detrace diff` of a whole run against one whose trace stopped early (the file-size limit) says
// that the second simply ends there and the runs agree up to its end, rather than calling the
// missing tail a schedule difference between different programs.
TEST(WriteFailure, DiffSaysWhereATraceCutShortEnds) {
  TempDir tmp;
  const std::string whole = tmp.file("whole"), cut = tmp.file("cut");
  Output a = testing::runShell(callBursts(fmt::format("{} record -o {} --", detrace(), whole)));
  ASSERT_EQ(a.status, 0) << a.out.substr(0, 2000);
  Output b = testing::runShell(callBursts(fmt::format("(ulimit -f 4096; {} record -o {} --", detrace(), cut)) + ")");
  expectProgramUnharmed(b, "file-size limit");
  auto reader_b = testing::openOnlyRank(cut);
  ASSERT_TRUE(reader_b.isOk()) << reader_b.status().message();
  auto events_b = (*reader_b)->eventCount();
  ASSERT_TRUE(events_b.isOk());

  Output d = testing::runShell(fmt::format("{} diff {} {} --json", detrace(), whole, cut), /*with_stderr=*/false);
  EXPECT_EQ(d.status, 1) << d.out.substr(0, 2000);  // the runs differ: B is shorter
  auto j = nlohmann::json::parse(d.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << d.out.substr(0, 2000);
  ASSERT_EQ(j["ranks"].size(), 1u);
  const auto& first = j["ranks"][0]["first"];
  EXPECT_EQ(first.value("ends_early", ""), "B") << first.dump();
  EXPECT_EQ(first.value("seq_a", int64_t{-2}), *events_b) << "B ends after its last event";
  EXPECT_NE(first.value("why", "").find("the runs agree up to its end"), std::string::npos) << first.dump();
  std::string warnings = j["warnings"].dump();
  EXPECT_NE(warnings.find("run B's trace was not finished"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("look like runs of different programs"), std::string::npos) << warnings;
}

// The run directory's own files: a file-size limit that leaves no room for the manifest is an
// error that says so (exit 2, the command not run), not a death by SIGXFSZ (exit 153).
TEST(WriteFailure, AFileSizeLimitThatLeavesNoRoomForTheManifestIsAClearError) {
  TempDir tmp;
  const std::string marker = tmp.file("ran");
  Output o = testing::runShell(
      fmt::format("(ulimit -f 0; {} record -o {} -- touch {})", detrace(), tmp.file("run"), marker));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("file-size limit"), std::string::npos) << o.out;
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the command ran without a manifest";
  EXPECT_FALSE(std::filesystem::exists(tmp.file("run/.manifest.json.tmp"))) << "a half-written manifest was left";
}

// Once the command has run, its exit status is owed whatever happens to the manifest's second
// write (a disk the traces filled, a directory removed): a warning, and the command's status.
TEST(WriteFailure, TheCommandsExitStatusSurvivesAManifestThatCannotBeCompleted) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Output o = testing::runShell(fmt::format("{} record -o {} -- /bin/sh -c 'rm -rf {}; exit 3'", detrace(), run, run));
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_NE(o.out.find("the manifest keeps the start's values"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace detrace
