// bisect on two recordings that agree on every rank they share while one rank's trace file of
// recording A holds nothing (a process killed as it began): the comparison is INCOMPLETE, never
// "no divergence". BisectOptions::detrace_exe points at a fake `detrace` (a shell script) that
// copies in a real two-rank run recorded on the GPU (tests/data/runs/tp2-nccl-*).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "detrace/db/run.h"
#include "detrace/replay/bisect.h"

#include "../db/test_util.h"

namespace detrace::replay {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string dataRun(const std::string& name) { return std::string(DETRACE_TEST_DATA_DIR) + "/runs/" + name; }

TEST(BisectIncomplete, ARankMissingFromOneRecordingIsIncompleteNotIdentical) {
  TempDir tmp;
  const std::string prepared = tmp.file("prepared");
  fs::create_directories(prepared);
  fs::copy(dataRun("tp2-nccl-a"), prepared + "/digest-a", fs::copy_options::recursive);
  fs::copy(dataRun("tp2-nccl-b"), prepared + "/digest-b", fs::copy_options::recursive);
  // Rank 1's file of A: emptied, as a process killed before its first commit leaves it.
  auto run = db::Run::open(prepared + "/digest-a");
  ASSERT_TRUE(run.isOk()) << run.status().message();
  std::string rank1;
  for (const db::RankFile& f : run->ranks()) {
    if (f.rank == 1) rank1 = f.path;
  }
  ASSERT_FALSE(rank1.empty());
  fs::resize_file(rank1, 0);

  const std::string fake = tmp.file("fake-detrace");
  std::ofstream(fake) << "#!/bin/sh\nrm -rf \"$3\" && cp -r " << prepared << "/$(basename \"$3\") \"$3\"\n";
  chmod(fake.c_str(), 0755);

  BisectOptions o;
  o.command_a = {"python", "tp2.py"};
  o.workdir = tmp.file("work");
  o.detrace_exe = fake;
  o.allow_gpu = false;
  auto r = bisect(o);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_FALSE(r->diverged);
  EXPECT_TRUE(r->incomplete);
  EXPECT_EQ(r->uncompared_ranks, std::vector<int32_t>{1});
  EXPECT_TRUE(r->verdict.starts_with("INCOMPLETE")) << r->verdict;
  EXPECT_EQ(r->verdict.find("bit-identical at every"), std::string::npos) << r->verdict;
  nlohmann::json j = bisectJson(*r);
  EXPECT_EQ(j["complete"], false);
  EXPECT_EQ(j["uncompared_ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(j["diverged"], false);
}

}  // namespace
}  // namespace detrace::replay
