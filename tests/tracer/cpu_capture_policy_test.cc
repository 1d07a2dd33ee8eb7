// The capture options (levels, --capture-ops, --capture-range, --window) and the recording
// window's decisions, launch by launch.
#include <limits>

#include <gtest/gtest.h>

#include <cstdlib>

#include "detrace/tracer/capture_policy.h"
#include "detrace/tracer/window_gate.h"

namespace detrace::tracer {
namespace {

TEST(CapturePolicy, ParsesRanges) {
  auto r = parseIndexRange("3:7");
  ASSERT_TRUE(r.isOk());
  EXPECT_FALSE(r->contains(2));
  EXPECT_TRUE(r->contains(3));
  EXPECT_TRUE(r->contains(6));
  EXPECT_FALSE(r->contains(7));
  auto open_end = parseIndexRange("5:");
  ASSERT_TRUE(open_end.isOk());
  EXPECT_TRUE(open_end->contains(1'000'000));
  EXPECT_FALSE(open_end->contains(4));
  auto single = parseIndexRange("9");
  ASSERT_TRUE(single.isOk());
  EXPECT_TRUE(single->contains(9));
  EXPECT_FALSE(single->contains(10));
  for (const char* bad : {"", ":", "a:b", "7:3", "3:3", "-1:4", "1:2:3"}) {
    auto b = parseIndexRange(bad);
    EXPECT_FALSE(b.isOk()) << bad;
  }
}

TEST(CapturePolicy, ParsesOpFilters) {
  auto all = parseOpFilter("");
  ASSERT_TRUE(all.isOk());
  EXPECT_TRUE(all->matches(true, "gemm"));
  EXPECT_TRUE(all->matches(false, "AllReduce"));

  auto gemms = parseOpFilter("gemm");
  ASSERT_TRUE(gemms.isOk());
  EXPECT_TRUE(gemms->matches(true, "gemm"));
  EXPECT_FALSE(gemms->matches(false, "AllReduce"));

  auto ar = parseOpFilter(" allreduce , ReduceScatter");
  ASSERT_TRUE(ar.isOk());
  EXPECT_TRUE(ar->matches(false, "AllReduce"));
  EXPECT_TRUE(ar->matches(false, "ReduceScatter"));
  EXPECT_FALSE(ar->matches(false, "AllGather"));
  EXPECT_FALSE(ar->matches(true, "gemm"));

  // GEMMs by entry point.
  auto lt = parseOpFilter("cublasLtMatmul");
  ASSERT_TRUE(lt.isOk());
  EXPECT_TRUE(lt->matches(true, "cublasLtMatmul"));
  EXPECT_FALSE(lt->matches(true, "cublasGemmEx"));
  EXPECT_FALSE(lt->matches(false, "AllReduce"));

  // Kinds and names add up.
  auto mixed = parseOpFilter("AllReduce,gemm");
  ASSERT_TRUE(mixed.isOk());
  EXPECT_TRUE(mixed->matches(true, "gemm"));
  EXPECT_TRUE(mixed->matches(false, "AllReduce"));
  EXPECT_FALSE(mixed->matches(false, "AllGather"));
  auto everything = parseOpFilter("gemm,collective,AllReduce");
  ASSERT_TRUE(everything.isOk());
  EXPECT_TRUE(everything->matches(true, "gemm"));
  EXPECT_TRUE(everything->matches(false, "AllGather"));

  EXPECT_FALSE(parseOpFilter(" , ").isOk());
  EXPECT_FALSE(parseIndexRange("9223372036854775807").isOk());
}

// A name that selects no op a trace can hold is refused, so that a typo does not leave a full
// capture with no copies; the message offers the nearest name and lists them all.
TEST(CapturePolicy, RefusesOpNamesThatSelectNothing) {
  auto typo = parseOpFilter("gemm, AllReduse");
  ASSERT_FALSE(typo.isOk());
  EXPECT_EQ(typo.status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = typo.status().message();
  EXPECT_NE(m.find("'AllReduse' is not the name of an op"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean AllReduce?"), std::string::npos) << m;
  EXPECT_NE(m.find("cublasGemmStridedBatchedEx"), std::string::npos) << m;

  auto lt = parseOpFilter("cublasLtMatmull");
  ASSERT_FALSE(lt.isOk());
  EXPECT_NE(lt.status().message().find("did you mean cublasLtMatmul?"), std::string::npos)
      << lt.status().message();
  // Nothing near: no guess, the list alone.
  auto far = parseOpFilter("attention");
  ASSERT_FALSE(far.isOk());
  EXPECT_EQ(far.status().message().find("did you mean"), std::string::npos) << far.status().message();
  EXPECT_NE(far.status().message().find("AllToAll"), std::string::npos) << far.status().message();

  // Parts of names still select, in any case.
  for (const char* part : {"reduce", "SCATTER", "matmul", "gemmex", "sgemm", "send", "recv"}) {
    auto f = parseOpFilter(part);
    EXPECT_TRUE(f.isOk()) << part << ": " << f.status().message();
  }
  auto reduce = parseOpFilter("reduce");
  ASSERT_TRUE(reduce.isOk());
  EXPECT_TRUE(reduce->matches(false, "AllReduce"));
  EXPECT_TRUE(reduce->matches(false, "ReduceScatter"));
  EXPECT_FALSE(reduce->matches(false, "AllGather"));
}

TEST(CapturePolicy, ParsesLevelsAndWindows) {
  EXPECT_EQ(*parseCaptureLevel("full"), CaptureLevel::kFull);
  EXPECT_FALSE(parseCaptureLevel("everything").isOk());
  auto w = parseWindow("steps:2:4");
  ASSERT_TRUE(w.isOk());
  EXPECT_EQ(w->unit, RecordWindow::Unit::kSteps);
  EXPECT_TRUE(w->range.contains(3));
  EXPECT_EQ(parseWindow("")->unit, RecordWindow::Unit::kAll);
  for (const char* bad : {"steps", "minutes:1:2", "ops:5:1", "launches:x"}) {
    EXPECT_FALSE(parseWindow(bad).isOk()) << bad;
  }
}

TEST(CapturePolicy, ReadsTheEnvironmentAndReportsBadValues) {
  setenv("DETRACE_CAPTURE", "full", 1);
  setenv("DETRACE_CAPTURE_OPS", "collective", 1);
  setenv("DETRACE_CAPTURE_RANGE", "10:20", 1);
  setenv("DETRACE_MAX_CAPTURE_BYTES", "not-a-number", 1);
  setenv("DETRACE_WINDOW", "ops:0:100", 1);
  std::vector<std::string> problems;
  CapturePolicy p = CapturePolicy::fromEnvironment(problems);
  for (const char* v : {"DETRACE_CAPTURE", "DETRACE_CAPTURE_OPS", "DETRACE_CAPTURE_RANGE",
                        "DETRACE_MAX_CAPTURE_BYTES", "DETRACE_WINDOW"}) {
    unsetenv(v);
  }
  EXPECT_EQ(p.level, CaptureLevel::kFull);
  EXPECT_TRUE(p.capturesOp(12, false, "AllReduce"));
  EXPECT_FALSE(p.capturesOp(12, true, "gemm"));
  EXPECT_FALSE(p.capturesOp(20, false, "AllReduce"));
  EXPECT_EQ(p.max_capture_bytes, kDefaultMaxCaptureBytes);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("DETRACE_MAX_CAPTURE_BYTES"), std::string::npos);
  EXPECT_EQ(p.window.unit, RecordWindow::Unit::kOps);
  EXPECT_TRUE(p.isStep("Step 3"));
  EXPECT_FALSE(p.isStep("layer 3"));

  // A misspelt list, set by hand: a problem, and no op's operands copied (not every op's).
  setenv("DETRACE_CAPTURE", "full", 1);
  setenv("DETRACE_CAPTURE_OPS", "gemm,AllReduse", 1);
  std::vector<std::string> typo_problems;
  CapturePolicy typo = CapturePolicy::fromEnvironment(typo_problems);
  unsetenv("DETRACE_CAPTURE");
  unsetenv("DETRACE_CAPTURE_OPS");
  ASSERT_EQ(typo_problems.size(), 1u);
  EXPECT_NE(typo_problems[0].find("copying no operands"), std::string::npos) << typo_problems[0];
  EXPECT_NE(typo_problems[0].find("did you mean AllReduce?"), std::string::npos) << typo_problems[0];
  EXPECT_FALSE(typo.capturesOp(0, true, "cublasLtMatmul"));
  EXPECT_FALSE(typo.capturesOp(0, false, "AllReduce"));
}

// A kernel window whose launch number and span would pass INT64_MAX is refused (the end was
// computed as N + K + 1, a signed overflow); the largest that fits is taken.
TEST(CapturePolicy, AKernelWindowPastTheLargestCountIsRefused) {
  EXPECT_FALSE(parseWindow("kernel:x@9223372036854775807").isOk());
  EXPECT_FALSE(parseWindow("kernel:x@9223372036854775000+1000").isOk());
  auto edge = parseWindow("kernel:x@9223372036854775806+0");
  ASSERT_TRUE(edge.isOk()) << edge.status().message();
  EXPECT_EQ(edge->range.end, std::numeric_limits<int64_t>::max());
}

// DETRACE_WINDOW set by hand with a look-back (-B), which only the deep window can do: refused
// with a problem that says so, as `record --window` refuses it, and everything is recorded.
TEST(CapturePolicy, ALookBackInDetraceWindowIsRefused) {
  setenv("DETRACE_WINDOW", "kernel:gemm@3-2", 1);
  std::vector<std::string> problems;
  CapturePolicy p = CapturePolicy::fromEnvironment(problems);
  unsetenv("DETRACE_WINDOW");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("cannot look back"), std::string::npos) << problems[0];
  EXPECT_EQ(p.window.unit, RecordWindow::Unit::kAll);
}

// --row-digests: tokens (the default) or all, read back from DETRACE_ROW_DIGESTS; anything else
// is a problem reported with what is accepted, and leaves the default.
TEST(CapturePolicy, RowDigestsFromTheEnvironment) {
  EXPECT_EQ(*parseRowDigests("all"), RowDigests::kAll);
  EXPECT_EQ(*parseRowDigests("tokens"), RowDigests::kTokens);
  EXPECT_FALSE(parseRowDigests("rows").isOk());
  EXPECT_STREQ(rowDigestsName(RowDigests::kTokens), "tokens");
  EXPECT_STREQ(rowDigestsName(RowDigests::kAll), "all");
  std::vector<std::string> none;
  EXPECT_EQ(CapturePolicy::fromEnvironment(none).row_digests, RowDigests::kTokens);
  EXPECT_TRUE(none.empty());
  setenv("DETRACE_ROW_DIGESTS", "all", 1);
  std::vector<std::string> problems;
  const RowDigests all = CapturePolicy::fromEnvironment(problems).row_digests;
  setenv("DETRACE_ROW_DIGESTS", "weights", 1);
  std::vector<std::string> bad;
  const RowDigests fallback = CapturePolicy::fromEnvironment(bad).row_digests;
  unsetenv("DETRACE_ROW_DIGESTS");
  EXPECT_EQ(all, RowDigests::kAll);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(fallback, RowDigests::kTokens);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("use all"), std::string::npos) << bad[0];
}

// --graph-weights-every: a whole number of replays, 1 (every replay) by default, read back from
// DETRACE_GRAPH_WEIGHTS_EVERY; anything else is reported and replaced by 1.
TEST(CapturePolicy, GraphWeightsEveryFromTheEnvironment) {
  EXPECT_EQ(*parseGraphWeightsEvery("1"), 1);
  EXPECT_EQ(*parseGraphWeightsEvery("64"), 64);
  EXPECT_EQ(*parseGraphWeightsEvery("1000000"), 1000000);
  for (const char* bad : {"0", "-3", "1000001", "4x", "", " 4", "often"}) {
    auto r = parseGraphWeightsEvery(bad);
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_NE(r.status().message().find("--graph-weights-every"), std::string::npos) << bad;
  }
  std::vector<std::string> none;
  EXPECT_EQ(CapturePolicy::fromEnvironment(none).graph_weights_every, 1);
  setenv("DETRACE_GRAPH_WEIGHTS_EVERY", "16", 1);
  std::vector<std::string> problems;
  const int64_t sixteen = CapturePolicy::fromEnvironment(problems).graph_weights_every;
  setenv("DETRACE_GRAPH_WEIGHTS_EVERY", "0", 1);
  std::vector<std::string> bad;
  const int64_t fallback = CapturePolicy::fromEnvironment(bad).graph_weights_every;
  unsetenv("DETRACE_GRAPH_WEIGHTS_EVERY");
  EXPECT_EQ(sixteen, 16);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(fallback, 1);
  EXPECT_EQ(bad.size(), 1u);
}

TEST(CapturePolicy, ParsesKernelWindowsAndWritesWindowsBack) {
  auto w = parseWindow("kernel:at::native::index_add@3+5");
  ASSERT_TRUE(w.isOk()) << w.status().message();
  EXPECT_EQ(w->unit, RecordWindow::Unit::kKernel);
  EXPECT_EQ(w->kernel, "at::native::index_add");  // colons in the name are the name's
  EXPECT_EQ(w->range.begin, 3);
  EXPECT_EQ(w->range.end, 9);
  auto d = parseWindow("kernel:racy@0");
  ASSERT_TRUE(d.isOk());
  EXPECT_EQ(d->range.end - d->range.begin, kDefaultKernelWindowLaunches);
  auto back = parseWindow("kernel:racy@2-3+4");
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(back->before, 3);
  EXPECT_EQ(back->range.begin, 2);
  EXPECT_EQ(back->range.end, 7);
  EXPECT_EQ(parseWindow("kernel:racy@2-3")->range.end - 2, kDefaultKernelWindowLaunches);
  for (const char* bad : {"kernel:racy", "kernel:@2", "kernel:racy@x", "kernel:racy@2+", "kernel:racy@-1",
                          "kernel:racy@2-", "kernel:racy@2-x+1", "kernel:racy@2-257"}) {
    auto b = parseWindow(bad);
    ASSERT_FALSE(b.isOk()) << bad;
    EXPECT_NE(b.status().message().find("kernel:NAME@N"), std::string::npos) << b.status().message();
  }
  for (const char* text : {"steps:2:4", "ops:1:", "launches:0:10", "kernel:a::b@1+2", "kernel:a@0-4+2", ""}) {
    auto parsed = parseWindow(text);
    ASSERT_TRUE(parsed.isOk()) << text;
    EXPECT_EQ(windowText(*parsed), text);
  }
}

TEST(CapturePolicy, DeepFromTheEnvironmentImpliesDigests) {
  setenv("DETRACE_CAPTURE", "meta", 1);
  setenv("DETRACE_DEEP", "ops:4:6", 1);
  std::vector<std::string> problems;
  CapturePolicy p = CapturePolicy::fromEnvironment(problems);
  setenv("DETRACE_DEEP", "ops", 1);
  std::vector<std::string> bad_problems;
  CapturePolicy bad = CapturePolicy::fromEnvironment(bad_problems);
  unsetenv("DETRACE_CAPTURE");
  unsetenv("DETRACE_DEEP");
  EXPECT_TRUE(problems.empty());
  EXPECT_TRUE(p.deep);
  EXPECT_EQ(p.deep_window.unit, RecordWindow::Unit::kOps);
  EXPECT_EQ(p.level, CaptureLevel::kDigest);
  EXPECT_FALSE(bad.deep);
  ASSERT_EQ(bad_problems.size(), 1u);
  EXPECT_NE(bad_problems[0].find("DETRACE_DEEP"), std::string::npos);
}

TEST(WindowGate, KernelWindowOpensAtTheNthLaunchOfTheKernel) {
  WindowGate g(*parseWindow("kernel:racy@1+2"));
  const char* names[] = {"_Z4fillPf", "_Z9racy_binsPKfiPf", "_Z7consumePKfPfi", "_Z9racy_binsPKfiPf",
                         "_Z7consumePKfPfi", nullptr, "_Z4fillPf", "_Z9racy_binsPKfiPf"};
  std::vector<bool> got;
  for (const char* n : names) got.push_back(g.admitLaunch(n));
  // The second racy launch (index 3) and the two launches after it, whatever their names; a
  // launch without a name neither opens the window nor is counted as a match.
  EXPECT_EQ(got, (std::vector<bool>{false, false, false, true, true, true, false, false}));
  EXPECT_FALSE(g.admitOp().record);
}

// CUDA gives kernel names mangled: a qualified NAME is looked for in its mangled form at the start
// of the name, so `kernel:at::native::index_add` opens at PyTorch's kernel, whatever its template
// arguments and parameters, and not at a kernel of another namespace with the same last part, nor
// at a kernel that names it in its template arguments.
TEST(WindowGate, AQualifiedKernelNameMatchesItsMangledForm) {
  auto w = parseWindow("kernel:at::native::index_add@0+0");
  ASSERT_TRUE(w.isOk()) << w.status().message();
  EXPECT_EQ(w->kernel_needle, "2at6native9index_add");
  EXPECT_EQ(windowText(*w), "kernel:at::native::index_add@0+0") << "written back as given";
  EXPECT_FALSE(kernelNameMatches(*w, "_ZN5other6native9index_addEPfi")) << "another namespace";
  EXPECT_FALSE(kernelNameMatches(*w, "_Z9index_addPfi")) << "not in at::native";
  EXPECT_FALSE(kernelNameMatches(*w, "_ZN3cub18DeviceReduceKernelIN2at6native9index_addEEEvv"))
      << "only named in another kernel's template arguments";
  EXPECT_FALSE(kernelNameMatches(*w, "_ZN2at6native13index_add_mixEPf")) << "a longer name";
  EXPECT_FALSE(kernelNameMatches(*w, nullptr));
  EXPECT_TRUE(kernelNameMatches(*w, "_ZN2at6native9index_addIfLi4EEEvPT_i"));
  WindowGate g(*w);
  EXPECT_FALSE(g.admitLaunch("_ZN3cub18DeviceReduceKernelIN2at6native9index_addEEEvv"));
  EXPECT_TRUE(g.admitLaunch("_ZN2at6native9index_addIfLi4EEEvPT_i")) << "the gate asks the same";

  auto ns = parseWindow("kernel:at::native@0");
  ASSERT_TRUE(ns.isOk());
  EXPECT_TRUE(kernelNameMatches(*ns, "_ZN2at6native9index_addIfEEvPT_")) << "a namespace holds its kernels";
  EXPECT_FALSE(kernelNameMatches(*ns, "_ZN2at8native_x3fooEv"));
  auto in_std = parseWindow("kernel:std::sort_kernel@0");
  ASSERT_TRUE(in_std.isOk());
  EXPECT_EQ(in_std->kernel_needle, "St11sort_kernel");
  EXPECT_TRUE(kernelNameMatches(*in_std, "_ZSt11sort_kernelPi")) << "directly in std: _ZSt";
  EXPECT_TRUE(kernelNameMatches(*parseWindow("kernel:std::detail::f@0"), "_ZNSt6detail1fEv"));

  auto global = parseWindow("kernel:::racy@0");
  ASSERT_TRUE(global.isOk());
  EXPECT_EQ(global->kernel_needle, "racy") << "a leading :: is the global namespace";
  EXPECT_TRUE(kernelNameMatches(*global, "_Z9racy_binsPKfiPf")) << "plain names match anywhere";
  for (const char* bad : {"kernel:at::native::index_add<float>@0", "kernel:at::@0", "kernel:a::::b@0",
                          "kernel:at::native::f(int)@0", "kernel:a::2b@0"}) {
    auto b = parseWindow(bad);
    ASSERT_FALSE(b.isOk()) << bad;
    EXPECT_NE(b.status().message().find("plain identifier"), std::string::npos) << b.status().message();
  }
  auto empty = parseWindow("kernel:::@0");
  ASSERT_FALSE(empty.isOk()) << "an empty name would match every kernel";
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos) << empty.status().message();
}

TEST(WindowGate, KernelWindowThatLooksBackAdmitsEarlierLaunchesSpeculatively) {
  WindowGate g(*parseWindow("kernel:racy@1-2+1"));
  const char* names[] = {"fill", "racy", "fill", "axpy", "racy", "consume", "fill"};
  std::vector<std::pair<bool, bool>> got;  // record, speculative
  for (const char* n : names) {
    WindowGate::LaunchTicket t = g.admitLaunchTicket(n);
    got.emplace_back(t.record, t.speculative);
  }
  // Before the second racy launch everything is speculative; it opens the window (1 + 1 launches),
  // and after the window nothing is admitted, speculatively or not.
  std::vector<std::pair<bool, bool>> want = {{true, true}, {true, true}, {true, true}, {true, true},
                                             {true, false}, {true, false}, {false, false}};
  EXPECT_EQ(got, want);
  WindowGate plain(*parseWindow("kernel:racy@0+1"));
  EXPECT_FALSE(plain.admitLaunchTicket("fill").speculative);
  EXPECT_FALSE(plain.admitLaunchTicket("fill").record);
}

TEST(WindowGate, KernelWindowKeepsTheOpsInsideIt) {
  WindowGate g(*parseWindow("kernel:norm@0+3"));
  EXPECT_FALSE(g.admitOp().record);       // before the window opens
  EXPECT_TRUE(g.admitLaunch("rms_norm"));  // opens it: launch 0 of 4
  EXPECT_TRUE(g.admitOp().record);
  EXPECT_TRUE(g.admitLaunch("gemm"));
  EXPECT_TRUE(g.admitLaunch("gemm"));
  EXPECT_TRUE(g.admitLaunch("gemm"));
  EXPECT_FALSE(g.admitOp().record);
  EXPECT_FALSE(g.admitLaunch("rms_norm"));  // occurrence 1: the window has closed for good
}

TEST(WindowGate, RecordsEverythingWithoutAWindow) {
  WindowGate g;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(g.admitLaunch());
  auto t0 = g.admitOp();
  auto t1 = g.admitOp();
  EXPECT_EQ(t0.index, 0);
  EXPECT_EQ(t1.index, 1);
  EXPECT_TRUE(t1.record);
}

TEST(WindowGate, LaunchWindowCountsEveryLaunch) {
  WindowGate g(*parseWindow("launches:2:4"));
  std::vector<bool> got;
  for (int i = 0; i < 6; ++i) got.push_back(g.admitLaunch());
  EXPECT_EQ(got, (std::vector<bool>{false, false, true, true, false, false}));
}

TEST(WindowGate, OpWindowKeepsTheOpsAndTheKernelsAfterThem) {
  WindowGate g(*parseWindow("ops:1:2"));
  EXPECT_FALSE(g.admitLaunch());        // before op 0
  EXPECT_FALSE(g.admitOp().record);     // op 0
  EXPECT_FALSE(g.admitLaunch());        // op 0's kernel
  auto op1 = g.admitOp();               // op 1: in
  EXPECT_EQ(op1.index, 1);
  EXPECT_TRUE(op1.record);
  EXPECT_TRUE(g.admitLaunch());         // op 1's kernel and those up to op 2
  EXPECT_FALSE(g.admitOp().record);     // op 2
  EXPECT_FALSE(g.admitLaunch());
}

TEST(WindowGate, StepWindowFollowsNvtxSteps) {
  WindowGate g(*parseWindow("steps:1:2"));
  // step 0, with a nested layer range
  EXPECT_FALSE(g.notePush(true, 0));
  EXPECT_FALSE(g.notePush(false, 1));
  EXPECT_FALSE(g.admitLaunch());
  EXPECT_FALSE(g.notePop(1));
  EXPECT_FALSE(g.notePop(0));
  // step 1: everything inside is recorded, the markers too
  EXPECT_TRUE(g.notePush(true, 0));
  EXPECT_TRUE(g.notePush(false, 1));
  EXPECT_TRUE(g.admitLaunch());
  EXPECT_TRUE(g.admitOp().record);
  EXPECT_TRUE(g.notePop(1));
  EXPECT_TRUE(g.notePop(0));
  // between steps and in step 2: out
  EXPECT_FALSE(g.admitLaunch());
  EXPECT_FALSE(g.notePush(true, 0));
  EXPECT_FALSE(g.admitLaunch());
  EXPECT_EQ(g.steps(), 3);
}

// NVTX depth is per thread: another thread's pop at the same depth does not end the step.
TEST(WindowGate, OnlyTheStepsThreadEndsIt) {
  WindowGate g(*parseWindow("steps:0:1"));
  const uint64_t main_thread = 1, worker = 2;
  EXPECT_TRUE(g.notePush(true, 0, main_thread));
  EXPECT_TRUE(g.notePush(false, 0, worker));  // a worker's own range, depth 0 on its thread
  EXPECT_TRUE(g.notePop(0, worker));
  EXPECT_TRUE(g.admitLaunch());                // still inside step 0
  EXPECT_TRUE(g.notePop(0, main_thread));
  EXPECT_FALSE(g.admitLaunch());
}

}  // namespace
}  // namespace detrace::tracer
