// Golden tests: `detrace` on real runs recorded on an H200 (tests/data/runs, made by
// scripts/record-examples from examples/torch/tiny_decoder.py) against reviewed expected output
// (tests/data/golden). After a deliberate change of output, regenerate with
//   DETRACE_UPDATE_GOLDEN=1 build/dev/tests/detrace_replay_tests --gtest_filter='Golden*'
// and review the diff of tests/data/golden before committing.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/shell.h"

namespace detrace {
namespace {

struct Case {
  const char* golden;
  const char* args;
  int status;
};

// What the runs hold (see scripts/record-examples):
//   bs1-a, bs1-b        the same request twice: identical
//   nondet-a, nondet-b  a float sum with atomics (index_add_) in layer 1: run-to-run divergence
//                       entering through unfingerprinted kernels
//   h4k-bs1, h4k-bs64   the request alone and in a batch of 64: cuBLAS picks a split-K kernel at
//                       n=1 and a plain one at n=64, and the request's rows change
// and, from scripts/device-multigpu on 2 and 4 H200s (examples/torch/tp_nccl.py under torchrun):
//   tp2-nccl-a, -b      TP=2 over NCCL, the same run twice: identical, some of NCCL's copies
//                       placed elsewhere among the events; torchrun's agent left an empty file
//   tp4-nccl-bs1, -bs64 TP=4 over NCCL (4 GPUs) at bs=1 and bs=64: NCCL's channels grow with
//                       the message (1 -> 16) and the request's rows change at the first all-reduce
//   tp4-ipc-racy-a, -b  TP=4 (two ranks per GPU) with the one-shot IPC all-reduce declared through
//                       detrace/annotate.h, planted arrival-order sums on rank 3, --capture full
constexpr Case kCases[] = {
    {"info_bs1-a", "info bs1-a", 0},
    {"diff_bs1-a_bs1-b", "diff bs1-a bs1-b", 0},
    {"diff_nondet", "diff nondet-a nondet-b", 1},
    {"diff_batch", "diff h4k-bs1 h4k-bs64", 1},
    {"diff_batch_json", "diff h4k-bs1 h4k-bs64 --json", 1},
    {"diff_batch_off", "diff h4k-bs1 h4k-bs64 --batch off", 1},
    {"diff_many", "diff bs1-a nondet-a bs1-b nondet-b", 1},
    {"diff_qwen2_batch", "diff qwen2-bs1-a qwen2-bs64", 1},
    {"diff_qwen2_batch_json", "diff qwen2-bs1-a qwen2-bs64 --json", 1},
    {"diff_tp_racy", "diff tp-racy-a tp-racy-b", 1},
    {"diff_tp_racy_graph", "diff tp-racy-graph-a tp-racy-graph-b", 1},
    {"info_tp2_nccl", "info tp2-nccl-a", 0},
    {"diff_tp2_nccl", "diff tp2-nccl-a tp2-nccl-b", 0},
    {"diff_tp4_nccl_batch", "diff tp4-nccl-bs1 tp4-nccl-bs64", 1},
    {"diff_tp4_nccl_batch_json", "diff tp4-nccl-bs1 tp4-nccl-bs64 --json", 1},
    {"diff_tp4_ipc_racy", "diff tp4-ipc-racy-a tp4-ipc-racy-b", 1},
    {"diff_tp4_ipc_racy_json", "diff tp4-ipc-racy-a tp4-ipc-racy-b --json", 1},
    {"replay_tp4_ipc_racy", "replay tp4-ipc-racy-a --rank 3 --event 51 --no-gpu --repeat 3", 0},
};

void PrintTo(const Case& c, std::ostream* os) { *os << "detrace " << c.args; }

std::string run(const std::string& args, int& status) {
  testing::ShellOutput o = testing::runShell(fmt::format("cd {}/runs && {}/replay/detrace {}", DETRACE_TEST_DATA_DIR, DETRACE_BINARY_DIR, args));
  status = o.status;
  return o.out;
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, OutputMatchesTheReviewedGolden) {
  const Case& c = GetParam();
#if !DETRACE_TEST_HAVE_KERNELS
  if (std::string_view(c.args).starts_with("replay ")) {
    GTEST_SKIP() << "built without kernels/: detrace replay is unavailable";
  }
#endif
  int status = -1;
  std::string out = run(c.args, status);
  EXPECT_EQ(status, c.status) << out;
  std::string path = fmt::format("{}/golden/{}.txt", DETRACE_TEST_DATA_DIR, c.golden);
  if (const char* update = std::getenv("DETRACE_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path) << out;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " missing: run with DETRACE_UPDATE_GOLDEN=1 and review it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(out, expected.str()) << "detrace " << c.args << " changed its output";
}

INSTANTIATE_TEST_SUITE_P(RealRuns, Golden, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& case_info) {
                           std::string name = case_info.param.golden;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace detrace

#include <nlohmann/json.hpp>

namespace detrace {
namespace {

TEST(RealRunExport, PerfettoJsonOfARecordedRunHasItsKernelsAndGemms) {
  std::string out = fmt::format("{}/detrace-export-{}.json", ::testing::TempDir(), getpid());
  int status = -1;
  std::string log = run(fmt::format("export bs1-a -o {}", out), status);
  ASSERT_EQ(status, 0) << log;
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  std::remove(out.c_str());
  int64_t slices = 0, kernels_with_grid = 0, gemm_instants = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    bool has_args = e.contains("args");
    if (cat == "gemm" && has_args && e["args"].contains("k")) ++gemm_instants;
    if (e.value("ph", "") != "X") continue;
    ++slices;
    EXPECT_GE(e.value("dur", -1.0), 0.0);
    if (cat == "kernel" && has_args && e["args"].contains("grid")) ++kernels_with_grid;
  }
  // bs1-a: 300 kernels with GPU times (detrace info); GEMMs are API events (instants).
  EXPECT_EQ(kernels_with_grid, 300);
  EXPECT_GE(slices, 300);
  EXPECT_EQ(gemm_instants, 40);
}

}  // namespace
}  // namespace detrace
