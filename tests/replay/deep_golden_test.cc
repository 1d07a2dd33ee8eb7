// Golden test of `detrace diff` on a deep window pair: the synthetic toy layer of deep_synth.h
// recorded twice with --deep ops:0:1 (launches 1-4), its planted racy reduction writing other
// bytes in the second run. The runs are written at test time with a fixed input, so the report is
// stable. After a deliberate change of output, regenerate with
//   DETRACE_UPDATE_GOLDEN=1 build/dev/tests/detrace_replay_tests --gtest_filter='DeepGolden*'
// and review the diff of tests/data/golden before committing.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"
#include "deep_synth.h"

namespace detrace {
namespace {

struct DeepCase {
  const char* golden;
  const char* args;
};

constexpr DeepCase kDeepCases[] = {
    {"diff_deep", "diff deep-a deep-b"},
    {"diff_deep_json", "diff deep-a deep-b --json"},
};

class DeepGolden : public ::testing::TestWithParam<DeepCase> {};

TEST_P(DeepGolden, OutputMatchesTheReviewedGolden) {
  const DeepCase& c = GetParam();
  testing::TempDir tmp;
  testing::deep::RunSpec spec{false, 1, 5, "ops:0:1", 20251201, {}};
  testing::deep::Program program = testing::deep::toyLayer();
  ASSERT_TRUE(testing::deep::writeRun(tmp.file("deep-a"), program, spec).isOk());
  spec.b = true;
  ASSERT_TRUE(testing::deep::writeRun(tmp.file("deep-b"), program, spec).isOk());
  testing::ShellOutput o = testing::runShell(
      fmt::format("cd {} && {} {}", tmp.path().string(), testing::detraceExe(), c.args));
  EXPECT_EQ(o.status, 1) << o.out;
  std::string path = fmt::format("{}/golden/{}.txt", DETRACE_TEST_DATA_DIR, c.golden);
  if (const char* update = std::getenv("DETRACE_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path) << o.out;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " missing: run with DETRACE_UPDATE_GOLDEN=1 and review it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(o.out, expected.str()) << "detrace " << c.args << " changed its output";
}

INSTANTIATE_TEST_SUITE_P(SyntheticDeepPair, DeepGolden, ::testing::ValuesIn(kDeepCases),
                         [](const ::testing::TestParamInfo<DeepCase>& case_info) {
                           return std::string(case_info.param.golden);
                         });

}  // namespace
}  // namespace detrace
