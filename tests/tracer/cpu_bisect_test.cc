// `detrace bisect` end to end without a GPU, on a program recorded through the NCCL seam (a fake
// libnccl): identical runs give exit 0 and say so; a failing command and bad usage give exit 2
// with a message. The GPU path (divergence, capture, replay) is exercised on the device.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../db/test_util.h"

namespace detrace {
namespace {

using testing::TempDir;

struct Output {
  int status;
  std::string out;
};

Output sh(const std::string& cmd) {
  std::FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string detrace() { return std::string(DETRACE_BINARY_DIR) + "/replay/detrace"; }
std::string seamApp() { return std::string(DETRACE_BINARY_DIR) + "/tests/nccl_seam_app"; }

TEST(Bisect, IdenticalRunsEndWithExitZeroAndKeepTheirRuns) {
  TempDir tmp;
  std::string work = tmp.file("work");
  Output o = sh(fmt::format("{} bisect --workdir {} --json -- {} 0", detrace(), work, seamApp()));
  ASSERT_EQ(o.status, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_FALSE(j["diverged"].get<bool>());
  EXPECT_NE(j["verdict"].get<std::string>().find("bit-identical"), std::string::npos) << o.out;
  ASSERT_EQ(j["steps"].size(), 3u);  // record, record, diff
  EXPECT_EQ(j["steps"][2]["what"], "diff");
  EXPECT_NE(j["steps"][0]["command"].get<std::string>().find("record -o"), std::string::npos);
  for (const char* run : {"digest-a", "digest-b"}) {
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/{}/manifest.json", work, run))) << run;
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/{}.log", work, run))) << run;
  }
}

TEST(Bisect, AFailingCommandIsAnErrorThatNamesItsLog) {
  TempDir tmp;
  std::string cmd = fmt::format("{} bisect --workdir {} -- /bin/sh -c 'exit 3' 2>&1", detrace(), tmp.file("w"));
  std::FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("status 3"), std::string::npos) << out;
  EXPECT_NE(out.find("digest-a.log"), std::string::npos) << out;
}

TEST(Bisect, UsageErrors) {
  EXPECT_EQ(sh(fmt::format("{} bisect", detrace())).status, 2);
  EXPECT_EQ(sh(fmt::format("{} bisect -- /bin/true ::", detrace())).status, 2);
  EXPECT_EQ(sh(fmt::format("{} bisect --repeat 0 -- /bin/true", detrace())).status, 2);
}

}  // namespace
}  // namespace detrace
