// The capture switch and the commit paths on a real GPU: a CUDA program (attach_gpu_app.cu)
// recorded dormant, started and stopped with `detrace attach`; the kernels of each phase are in the
// trace exactly when capture was on, with their GPU times; context teardown and SIGTERM commit what
// was recorded. What a paused tracer costs is measured by bench/tracer/bench_overhead (paused).
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "detrace/db/reader.h"

#include "../db/test_util.h"
#include "common/gpu_test.h"
#include "line_child.h"
#include "common/shell.h"

extern char** environ;

namespace detrace {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string binDir() { return DETRACE_BINARY_DIR; }

int shell(const std::string& cmd, std::string& out) {
  testing::ShellOutput o = testing::runShell(cmd);
  out += o.out;
  return o.status;
}

enum class Tracer { kNone, kPaused, kRecording };

// This test's environment (CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, ...), plus the tracer.
std::vector<std::string> appEnvironment(Tracer tracer, const std::string& run,
                                        const std::string& xdg) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    // Settings for diagnosing a failure pass through (scripts/device-teardown); the rest are the
    // test's to choose.
    const bool diagnosis = kv.rfind("DETRACE_DIAG_", 0) == 0 || kv.rfind("DETRACE_ZEROED_BUFFERS=", 0) == 0;
    if ((kv.rfind("DETRACE_", 0) == 0 && !diagnosis) || kv.rfind("LD_PRELOAD=", 0) == 0 ||
        kv.rfind("CUDA_INJECTION64_PATH=", 0) == 0 || kv.rfind("XDG_RUNTIME_DIR=", 0) == 0) {
      continue;
    }
    env.push_back(kv);
  }
  if (tracer == Tracer::kNone) return env;
  std::string lib = binDir() + "/tracer/libdetrace_tracer.so";
  env.push_back("LD_PRELOAD=" + lib);
  env.push_back("CUDA_INJECTION64_PATH=" + lib);
  env.push_back("DETRACE_OUT_DIR=" + run);
  env.push_back("XDG_RUNTIME_DIR=" + xdg);
  if (tracer == Tracer::kPaused) env.push_back("DETRACE_PAUSED=1");
  return env;
}

struct GpuApp {
  GpuApp(const TempDir& tmp, Tracer tracer, const std::string& name = "run",
         const std::vector<std::string>& args = {})
      : run(tmp.file(name)),
        xdg(tmp.file(name + "-xdg")),
        child(binDir() + "/tests/attach_gpu_app", args, prepare(tracer)) {
    ready = child.line() == "ready " + std::to_string(child.pid());
  }
  std::vector<std::string> prepare(Tracer tracer) {
    fs::create_directories(run);
    fs::create_directories(xdg);
    fs::permissions(xdg, fs::perms::owner_all);
    return appEnvironment(tracer, run, xdg);
  }
  std::string trace() const { return run + "/proc-" + std::to_string(child.pid()) + ".dtrace"; }
  void launch(char phase, int n) {
    EXPECT_EQ(child.send(std::string("launch ") + phase + " " + std::to_string(n)), "ok");
  }
  int attach(const std::string& args) {
    std::string out;
    int rc =
        shell(binDir() + "/replay/detrace attach " + std::to_string(child.pid()) + " " + args, out);
    EXPECT_EQ(rc, 0) << out;
    return rc;
  }

  std::string run, xdg;
  testing::LineChild child;
  bool ready = false;
};

struct KernelCount {
  int n = 0;
  int with_gpu_times = 0;
};

// Kernels of the trace by short name ("phase_b_kernel"), with how many have GPU times.
std::map<std::string, KernelCount> kernels(const std::string& trace) {
  std::map<std::string, KernelCount> out;
  auto r = db::TraceReader::open(trace);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  if (!r.isOk()) return out;
  auto cursor = (*r)->events();
  EXPECT_TRUE(cursor.isOk());
  if (!cursor.isOk()) return out;
  while (auto more = cursor->next()) {
    if (!more.isOk() || !*more) break;
    const db::Event& e = cursor->event();
    if (e.kind != db::EventKind::kKernel) continue;
    std::string name = (*r)->str(e.name);
    name = name.substr(0, name.find('('));
    if (size_t sp = name.rfind(' '); sp != std::string::npos) name = name.substr(sp + 1);
    KernelCount& k = out[name];
    ++k.n;
    if (e.gpu_start_ns > 0 && e.gpu_end_ns >= e.gpu_start_ns) ++k.with_gpu_times;
  }
  return out;
}

TEST(AttachGpu, PausedProgramRecordsKernelsOnlyWhileStarted) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kPaused);
  ASSERT_TRUE(app.ready);
  app.launch('a', 5);
  EXPECT_FALSE(fs::exists(app.trace())) << "paused: no file before the first start";
  app.attach("start");
  app.launch('b', 7);
  app.attach("stop");
  app.launch('c', 3);
  app.attach("start --capture meta");
  app.launch('d', 2);
  app.child.say("exit");
  ASSERT_EQ(app.child.wait(), 0);
  auto k = kernels(app.trace());
  EXPECT_EQ(k.count("phase_a_kernel"), 0u);
  EXPECT_EQ(k["phase_b_kernel"].n, 7);
  EXPECT_EQ(k["phase_b_kernel"].with_gpu_times, 7) << "stop waits for the GPU records";
  EXPECT_EQ(k.count("phase_c_kernel"), 0u);
  EXPECT_EQ(k["phase_d_kernel"].n, 2);
  EXPECT_EQ(k["phase_d_kernel"].with_gpu_times, 2);
}

// The capture level may change from one start to the next, up as well as down: GEMMs recorded
// at `meta` have no fingerprints, those recorded after `start --capture digest` have them, and
// after `start --capture full` their operands' bytes too (fingerprints and staging memory are set
// up when first needed, not only at the process's first start).
TEST(AttachGpu, CaptureLevelRisesBetweenStarts) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kPaused);
  ASSERT_TRUE(app.ready);
  auto gemm = [&](int n) { EXPECT_EQ(app.child.send("gemm " + std::to_string(n)), "ok"); };
  app.attach("start --capture meta");
  gemm(3);
  app.attach("stop");
  app.attach("start --capture digest");
  gemm(4);
  app.attach("stop");
  app.attach("start --capture full");
  gemm(2);
  app.child.say("exit");
  ASSERT_EQ(app.child.wait(), 0);
  auto r = db::TraceReader::open(app.trace());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto gemms = (*r)->gemms();
  ASSERT_TRUE(gemms.isOk());
  ASSERT_EQ(gemms->size(), 9u);
  for (size_t i = 0; i < gemms->size(); ++i) {
    auto ops = (*r)->operands((*gemms)[i].first);
    ASSERT_TRUE(ops.isOk());
    bool digests = !ops->empty() && std::all_of(ops->begin(), ops->end(),
                                                [](const db::Operand& o) { return o.has_digest; });
    bool copies = !ops->empty() && std::all_of(ops->begin(), ops->end(),
                                               [](const db::Operand& o) { return o.capture_bytes > 0; });
    EXPECT_EQ(digests, i >= 3) << "GEMM " << i << ": " << ops->size() << " operand(s)";
    EXPECT_EQ(copies, i >= 7) << "GEMM " << i;
  }
}

// cudaDeviceReset, then _exit: no atexit runs, so only the commit at context teardown keeps the
// last kernels.
TEST(AttachGpu, ContextTeardownCommits) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kRecording);
  ASSERT_TRUE(app.ready);
  app.launch('e', 4);
  app.child.say("reset-exit");
  int status = app.child.wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto k = kernels(app.trace());
  EXPECT_EQ(k["phase_e_kernel"].n, 4);
  EXPECT_EQ(k["phase_e_kernel"].with_gpu_times, 4);
}

// A SIGKILL runs nothing of the tracer's: what CUPTI's flusher committed before it stays, the
// tracer's counters included (published every second, Session::publishStats).
TEST(AttachGpu, SigkillKeepsTheKernelsAndCountersCommittedBeforeIt) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kRecording);
  ASSERT_TRUE(app.ready);
  app.launch('b', 5);
  // CUPTI's records the reorder buffer took (tracer_launches counts launch callbacks, which
  // placement by correlation id, the default, does without).
  auto launches = [&]() -> int64_t {
    auto r = db::TraceReader::open(app.trace());
    if (!r.isOk()) return -1;
    auto stats = (*r)->stats();
    if (!stats.isOk() || !stats->count("tracer_activities")) return -1;
    return stats->at("tracer_activities");
  };
  int64_t seen = -1;
  for (int i = 0; i < 100 && seen < 5; ++i) {  // at most 10 s; about 1 s expected
    usleep(100'000);
    seen = launches();
  }
  ASSERT_GE(seen, 5) << "the counters were not committed while the program ran";
  // The kernels' rows follow their records by the ordering hold (about 500 ms).
  for (int i = 0; i < 100 && kernels(app.trace())["phase_b_kernel"].n < 5; ++i) usleep(100'000);
  ASSERT_EQ(kernels(app.trace())["phase_b_kernel"].n, 5) << "the kernels were not committed while the program ran";
  ASSERT_EQ(kill(app.child.pid(), SIGKILL), 0);
  int status = app.child.wait();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(launches(), seen);
  auto k = kernels(app.trace());
  EXPECT_EQ(k["phase_b_kernel"].n, 5);
  EXPECT_EQ(k["phase_b_kernel"].with_gpu_times, 5);
}

TEST(AttachGpu, SigtermCommitsKernelsAndKillsTheProgram) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kRecording);
  ASSERT_TRUE(app.ready);
  app.launch('b', 3);
  ASSERT_EQ(kill(app.child.pid(), SIGTERM), 0);
  int status = app.child.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  auto k = kernels(app.trace());
  EXPECT_EQ(k["phase_b_kernel"].n, 3);
  EXPECT_EQ(k["phase_b_kernel"].with_gpu_times, 3);
}

// A SIGTERM while the GPU is still running the program's kernels: the signal is finished on a
// thread of the tracer's, which has no CUDA context of its own, and the finish still waits for
// the program's context (up to half its time limit), so every kernel is in the trace with its
// GPU times. The program never synchronizes: 3 kernels of 400 ms each are still queued or
// running when the signal comes.
TEST(AttachGpu, SigtermWhileKernelsRunWaitsForThem) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kRecording);
  ASSERT_TRUE(app.ready);
  EXPECT_EQ(app.child.send("busy 3 400"), "ok");
  ASSERT_EQ(kill(app.child.pid(), SIGTERM), 0);
  int status = app.child.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  auto k = kernels(app.trace());
  EXPECT_EQ(k["busy_kernel"].n, 3);
  EXPECT_EQ(k["busy_kernel"].with_gpu_times, 3);
}

// A signal the program handles itself (its own SIGINT handler, installed before the tracer's)
// commits what is recorded and the recording goes on. The records held for ordering stay held:
// the matmuls just called, whose kernels' records are still on their way when the signal comes,
// get them as children when they arrive, as do the matmuls after it. (Settling them at the
// signal, as a context's teardown does, would write those matmuls without their kernels.)
TEST(AttachGpu, ASignalTheProgramHandlesKeepsHeldMatmulsWaitingForTheirKernels) {
  DETRACE_REQUIRE_GPU();
  TempDir tmp;
  GpuApp app(tmp, Tracer::kRecording, "run", {"--own-sigint"});
  ASSERT_TRUE(app.ready);
  for (int round = 0; round < 3; ++round) EXPECT_EQ(app.child.send("gemm-int 20"), "ok");
  EXPECT_EQ(app.child.send("gemm 20"), "ok");
  app.child.say("exit");
  int status = app.child.wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto r = db::TraceReader::open(app.trace());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto gemms = (*r)->gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  EXPECT_EQ(gemms->size(), 80u);
  std::map<int64_t, int> children;  // by matmul
  for (const auto& [seq, g] : *gemms) children[seq] = 0;
  auto cursor = (*r)->events();
  ASSERT_TRUE(cursor.isOk());
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    const db::Event& e = cursor->event();
    if (e.kind != db::EventKind::kKernel) continue;
    if (auto c = children.find(e.parent_seq); c != children.end()) ++c->second;
  }
  int childless = 0;
  for (const auto& [seq, n] : children) childless += n == 0;
  EXPECT_EQ(childless, 0) << "matmuls written without their kernels";
  auto stats = (*r)->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["tracer_records_placed_late"], 0);
  EXPECT_EQ((*stats)["tracer_activities_unmatched"], 0);
}

}  // namespace
}  // namespace detrace
