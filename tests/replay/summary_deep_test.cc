// `detrace info` on runs recorded with --deep: the deep line and the warnings that say why a deep
// diff may come up short. Synthetic rank files written with TraceWriter.
#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "detrace/replay/summary.h"

namespace detrace {
namespace {

void writeRank(const std::string& path, const std::map<std::string, int64_t>& stats, bool deep) {
  auto w = db::TraceWriter::create(path);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  (*w)->setRank({0, 1, 0, 0, 42, "h", "NVIDIA H200", ""});
  if (deep) (*w)->setMeta("deep_window", "ops:1:3");
  db::Event e;
  e.kind = db::EventKind::kKernel;
  e.name = (*w)->intern("k");
  (void)(*w)->append(e);
  for (const auto& [key, value] : stats) (*w)->addStat(key, value);
  ASSERT_TRUE((*w)->close().isOk());
}

std::string info(const std::string& dir) {
  auto run = db::Run::open(dir);
  EXPECT_TRUE(run.isOk()) << run.status().message();
  auto s = replay::summarize(*run);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  return replay::formatSummary(*s);
}

TEST(SummaryDeep, ShowsTheWindowAndItsCost) {
  testing::TempDir dir;
  testing::Rng rng;
  int64_t launches = rng.range(1, 1000), targets = rng.range(1, 5000);
  writeRank(dir.file("proc-42.dtrace"),
            {{"deep_launches", launches}, {"deep_targets", targets},
             {"deep_zero_filled_bytes", int64_t{3} << 20}, {"deep_host_ns", launches * 2500}},
            true);
  std::string text = info(dir.path().string());
  EXPECT_NE(text.find(fmt::format("deep      rank 0: window ops:1:3, {} launch(es) fingerprinted, {} "
                                  "allocation target(s), 3 MiB zero-filled, 2.5 us host time per launch",
                                  launches, targets)),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("warning"), std::string::npos) << text;
}

// A rank whose recorder could not follow some NCCL communicators (split from a non-blocking one)
// says how many, and what that costs the diff; none is said when there were none.
TEST(SummaryDeep, WarnsOfCommunicatorsTheRecorderCouldNotFollow) {
  testing::TempDir dir, clean;
  testing::Rng rng;
  const int64_t n = rng.range(1, 9);
  writeRank(dir.file("proc-42.dtrace"), {{"nccl_comms_unfollowed", n}}, false);
  std::string text = info(dir.path().string());
  EXPECT_NE(text.find(fmt::format("warning: rank 0: {} NCCL communicator(s) split or shrunk from a "
                                  "non-blocking communicator were not followed",
                                  n)),
            std::string::npos)
      << text;
  writeRank(clean.file("proc-42.dtrace"), {{"nccl_comms_unfollowed", 0}}, false);
  text = info(clean.path().string());
  EXPECT_EQ(text.find("not followed"), std::string::npos) << text;
}

// Calls of a simulated NCCL group that a stop wrote before the group's end are warned of.
TEST(SummaryDeep, WarnsOfSimulatedCallsWrittenAsIfTheyRan) {
  testing::TempDir dir, clean;
  testing::Rng rng;
  const int64_t n = rng.range(1, 9);
  writeRank(dir.file("proc-42.dtrace"), {{"nccl_simulated_calls_written", n}}, false);
  std::string text = info(dir.path().string());
  EXPECT_NE(text.find(fmt::format("warning: rank 0: {} NCCL call(s) of a group only simulated", n)),
            std::string::npos)
      << text;
  writeRank(clean.file("proc-42.dtrace"), {{"nccl_simulated_calls_written", 0}}, false);
  EXPECT_EQ(info(clean.path().string()).find("simulated"), std::string::npos);
}

// Calls past the bound of one NCCL group (a group never ended) are warned of.
TEST(SummaryDeep, WarnsOfGroupCallsPastTheBound) {
  testing::TempDir dir, clean;
  testing::Rng rng;
  const int64_t n = rng.range(1, 9);
  writeRank(dir.file("proc-42.dtrace"), {{"nccl_group_calls_past_cap", n}}, false);
  std::string text = info(dir.path().string());
  EXPECT_NE(text.find(fmt::format("warning: rank 0: {} NCCL call(s) came past the 4096th of one group", n)),
            std::string::npos)
      << text;
  writeRank(clean.file("proc-42.dtrace"), {{"nccl_group_calls_past_cap", 0}}, false);
  EXPECT_EQ(info(clean.path().string()).find("past the"), std::string::npos);
}

// The capture line: level, row digests, kernel placement and window, as rank 0's trace says; none
// for traces that do not say (recorded before these were written).
TEST(SummaryDeep, SaysHowTheRunWasCaptured) {
  testing::TempDir dir, old;
  {
    auto w = db::TraceWriter::create(dir.file("proc-42.dtrace"));
    ASSERT_TRUE(w.isOk()) << w.status().message();
    (*w)->setRank({0, 1, 0, 0, 42, "h", "NVIDIA H200", ""});
    (*w)->setMeta("capture", "digest");
    (*w)->setMeta("row_digests", "tokens");
    (*w)->setMeta("graph_weights_every", "16");
    (*w)->setMeta("kernel_placement", "correlation");
    (*w)->setMeta("window", "steps:2:4");
    ASSERT_TRUE((*w)->close().isOk());
  }
  std::string text = info(dir.path().string());
  EXPECT_NE(text.find("capture   digest, row digests tokens, graph weights every 16 replays, "
                      "kernels placed by correlation id, window steps:2:4\n"),
            std::string::npos)
      << text;
  writeRank(old.file("proc-42.dtrace"), {}, false);
  EXPECT_EQ(info(old.path().string()).find("capture "), std::string::npos);
}

TEST(SummaryDeep, WarnsAboutWhatTheWindowLost) {
  testing::TempDir dir;
  writeRank(dir.file("proc-42.dtrace"),
            {{"deep_launches", 10}, {"deep_params_lost", 2}, {"fingerprints_skipped_ring_full", 3},
             {"deep_zero_fill_failed", 1}, {"deep_no_param_layout", 4},
             {"deep_zero_fill_skipped_managed", 2}, {"deep_zero_fill_skipped_graph_capture", 5},
             {"deep_params_missing", 6}, {"deep_params_too_large", 1},
             {"deep_pointer_words_ignored", 9}, {"deep_allocations_refused", 11}},
            true);
  std::string text = info(dir.path().string());
  EXPECT_NE(text.find("lost 5 deep-window record(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("could not zero-fill 1 allocation(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("4 deep launch(es) had no parameter layout"), std::string::npos) << text;
  EXPECT_NE(text.find("7 allocation(s) were not zero-filled (managed memory"), std::string::npos) << text;
  EXPECT_NE(text.find("7 deep launch(es) passed parameters the tracer could not read"),
            std::string::npos) << text;
  EXPECT_NE(text.find("9 pointer argument(s) reached past the first 64"), std::string::npos) << text;
  EXPECT_NE(text.find("11 allocation(s) could not be tracked"), std::string::npos) << text;
}

// A deep window that lost nothing warns of nothing.
TEST(SummaryDeep, AWindowThatLostNothingWarnsOfNothing) {
  testing::TempDir dir;
  writeRank(dir.file("proc-42.dtrace"),
            {{"deep_launches", 10}, {"deep_targets", 12}, {"deep_launches_without_params", 3}}, true);
  std::string text = info(dir.path().string());
  EXPECT_EQ(text.find("warning"), std::string::npos) << text;
}

TEST(SummaryDeep, RunsWithoutADeepWindowSayNothingOfIt) {
  testing::TempDir dir;
  writeRank(dir.file("proc-42.dtrace"), {{"fingerprints_skipped_ring_full", 3}}, false);
  std::string text = info(dir.path().string());
  EXPECT_EQ(text.find("deep"), std::string::npos) << text;
}

}  // namespace
}  // namespace detrace
