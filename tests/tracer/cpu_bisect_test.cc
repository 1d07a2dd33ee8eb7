// `detrace bisect` end to end without a GPU, on a program recorded through the NCCL seam (a fake
// libnccl): runs without fingerprints, a failing command and bad usage give exit 2 with a message
// that says why. The GPU path (divergence, capture, replay) is exercised on the device.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"

namespace detrace {
namespace {

using testing::TempDir;

using Output = testing::ShellOutput;
Output sh(const std::string& cmd) { return testing::runShell(cmd + " 2>/dev/null", false); }

std::string detrace() { return std::string(DETRACE_BINARY_DIR) + "/replay/detrace"; }
std::string seamApp() { return std::string(DETRACE_BINARY_DIR) + "/tests/nccl_seam_app"; }

// Without a GPU the recordings carry no fingerprints: bisect must not call them identical.
TEST(Bisect, RunsWithoutFingerprintsAreAnErrorThatSaysSo) {
  TempDir tmp;
  std::string work = tmp.file("work");
  Output o = testing::runShell(fmt::format("{} bisect --workdir {} -- {} 0", detrace(), work, seamApp()));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find("no fingerprints"), std::string::npos) << o.out;
  for (const char* run : {"digest-a", "digest-b"}) {
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/{}/manifest.json", work, run))) << run;
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/{}.log", work, run))) << run;
  }
}

TEST(Bisect, AFailingCommandIsAnErrorThatNamesItsLog) {
  TempDir tmp;
  Output o = testing::runShell(fmt::format("{} bisect --workdir {} -- /bin/sh -c 'exit 3'", detrace(), tmp.file("w")));
  const std::string& out = o.out;
  EXPECT_EQ(o.status, 2) << out;
  EXPECT_NE(out.find("status 3"), std::string::npos) << out;
  EXPECT_NE(out.find("digest-a.log"), std::string::npos) << out;
}

TEST(Bisect, UsageErrors) {
  EXPECT_EQ(sh(fmt::format("{} bisect", detrace())).status, 2);
  EXPECT_EQ(sh(fmt::format("{} bisect -- /bin/true ::", detrace())).status, 2);
  EXPECT_EQ(sh(fmt::format("{} bisect --repeat 0 -- /bin/true", detrace())).status, 2);
  // --workdir without its value takes `--`: refused, nothing made in a directory named `--`.
  TempDir tmp;
  Output dashes = testing::runShell(fmt::format("cd {} && {} bisect --workdir -- /bin/true", tmp.path().string(), detrace()));
  EXPECT_EQ(dashes.status, 2) << dashes.out;
  EXPECT_NE(dashes.out.find("--workdir got \"--\", which looks like a flag"), std::string::npos) << dashes.out;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("--")));
  // An unknown flag is named alone (CLI11 listed the `--` after it too).
  Output bogus = testing::runShell(fmt::format("{} bisect --bogus -- /bin/true", detrace()));
  EXPECT_EQ(bogus.status, 2);
  EXPECT_NE(bogus.out.find("unknown option --bogus for detrace bisect"), std::string::npos) << bogus.out;
}

}  // namespace
}  // namespace detrace
