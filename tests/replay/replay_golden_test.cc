// Golden tests of `detrace replay`: the committed synthetic run tests/data/replay/synth
// (replay_synth.h says what it holds and how its recorded outputs were made) against
// reviewed expected output in tests/data/replay/golden. The tables use --no-gpu so that they read
// the same on machines with and without a GPU. After a deliberate change, regenerate the runs and
// the goldens with
//   DETRACE_UPDATE_GOLDEN=1 build/dev/tests/detrace_replay_tests --gtest_filter='ReplayGolden*'
// and review the diff of tests/data/replay before committing.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/shell.h"

#if DETRACE_TEST_HAVE_KERNELS
#include "replay_synth.h"
#endif

namespace detrace {
namespace {

struct Case {
  const char* golden;
  const char* args;
  int status;
};

constexpr Case kCases[] = {
    {"gemm", "replay synth --event 7 --no-gpu", 0},
    {"allreduce", "replay synth --event 2 --no-gpu", 0},
    {"allreduce_impls", "replay synth --event 2 --rank 2 --impl ring2,reversed/cpu,fp64 --repeat 5 --no-gpu", 0},
    {"pair_gemm", "replay synth --event 1 --pair synth --event-b 7 --no-gpu", 0},
    {"pair_allreduce_json",
     "replay synth --event 8 --rank 1 --pair synth --event-b 2 --no-gpu --json --repeat 2", 0},
    {"not_captured", "replay synth --event 4", 2},
    {"kernel_event", "replay synth --event 3", 2},
    {"allgather", "replay synth --event 5", 2},
    {"digest_run", "replay ../runs/h4k-bs1 --event 41", 2},
    {"unknown_impl", "replay synth --event 1 --impl ring2", 2},
    {"event_b_alone", "replay synth --event 1 --event-b 1", 2},
};

void PrintTo(const Case& c, std::ostream* os) { *os << "detrace " << c.args; }

std::string dataDir() { return fmt::format("{}/replay", DETRACE_TEST_DATA_DIR); }

bool updating() {
  const char* update = std::getenv("DETRACE_UPDATE_GOLDEN");
  return update != nullptr && *update == '1';
}

std::string run(const std::string& args, int& status) {
  testing::ShellOutput o = testing::runShell(fmt::format("cd {} && {}/replay/detrace {}", dataDir(), DETRACE_BINARY_DIR, args));
  status = o.status;
  return o.out;
}

class ReplayGolden : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
#if DETRACE_TEST_HAVE_KERNELS
    if (!updating()) return;
    const std::string dir = dataDir() + "/synth";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    Status s = testing::synth::writeToyRun(dir, {testing::synth::toyBs4(), testing::synth::toyBs8()});
    ASSERT_TRUE(s.isOk()) << s.message();
#endif
  }
};

TEST_P(ReplayGolden, OutputMatchesTheReviewedGolden) {
#if !DETRACE_TEST_HAVE_KERNELS
  GTEST_SKIP() << "built without kernels/: detrace replay is unavailable";
#endif
  const Case& c = GetParam();
  int status = -1;
  std::string out = run(c.args, status);
  EXPECT_EQ(status, c.status) << out;
  std::string path = fmt::format("{}/golden/{}.txt", dataDir(), c.golden);
  if (updating()) {
    std::filesystem::create_directories(dataDir() + "/golden");
    std::ofstream(path) << out;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " missing: run with DETRACE_UPDATE_GOLDEN=1 and review it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(out, expected.str()) << "detrace " << c.args << " changed its output";
}

INSTANTIATE_TEST_SUITE_P(SyntheticRuns, ReplayGolden, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::string(param.param.golden);
                         });

}  // namespace
}  // namespace detrace
