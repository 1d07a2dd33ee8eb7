// Deep window on the GPU: records tests/tracer/deep_gpu_app (deep_gpu_app.cu says what it does)
// with --deep and checks the trace against what the program did: fresh allocations zero-filled,
// the struct parameter's layout and both pointers inside it found, the digests of the memory
// before and after a launch equal to the CPU twin's digest of the bytes the program wrote out,
// the kernel:NAME@N window, and `detrace diff` of two runs naming the racy kernel as the origin and
// the kernel that reads its output as propagated.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/kernels/digest.h"
#include "detrace/tracer/launch_params.h"

#include "common/gpu_test.h"
#include "common/shell.h"

namespace detrace {
namespace {

struct Launch {
  db::Event event;
  std::string name;
  std::vector<db::Operand> operands;
  std::optional<db::LaunchParams> params;
};

struct DeepRun {
  std::string dir;
  std::string app_out;  // what the app printed
  std::unique_ptr<db::TraceReader> reader;
  std::vector<Launch> kernels;

  const Launch* first(const std::string& kernel) const {
    for (const Launch& l : kernels)
      if (l.name.find(kernel) != std::string::npos) return &l;
    return nullptr;
  }
};

std::string tempDir(const std::string& tag) {
  std::string dir = fmt::format("{}/deep-{}-{}", ::testing::TempDir(), tag, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void loadRun(DeepRun& out);

// Records the app (`app_args`, default: the main mode writing into the test's directory) with
// `deep` (and `record_args`, more options of `detrace record`) and loads its kernels with their
// deep records.
void recordApp(const std::string& tag, const std::string& deep, DeepRun& out,
               std::string app_args = "", const std::string& record_args = "") {
  std::string base = tempDir(tag);
  out.dir = base + "/run";
  if (app_args.empty()) app_args = base + " --seed 12345";
  testing::ShellOutput o = testing::runShell(
      fmt::format("{0}/replay/detrace record -o {1} --deep '{2}' {4} -- {0}/tests/deep_gpu_app {3}",
                  DETRACE_BINARY_DIR, out.dir, deep, app_args, record_args));
  ASSERT_EQ(o.status, 0) << o.out;
  out.app_out = o.out;
  loadRun(out);
}

void loadRun(DeepRun& out) {
  auto run = db::Run::open(out.dir);
  ASSERT_TRUE(run.isOk()) << run.status().message();
  auto reader = run->openRank(run->ranks()[0].rank);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  out.reader = std::move(*reader);
  auto cursor = out.reader->events(0, INT64_MAX, db::EventKind::kKernel);
  ASSERT_TRUE(cursor.isOk());
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    Launch l;
    l.event = cursor->event();
    l.name = out.reader->str(l.event.name);
    out.kernels.push_back(std::move(l));
  }
  for (Launch& l : out.kernels) {
    auto ops = out.reader->operands(l.event.seq);
    ASSERT_TRUE(ops.isOk());
    l.operands = *ops;
    auto params = out.reader->launchParams(l.event.seq);
    ASSERT_TRUE(params.isOk());
    l.params = *params;
  }
}

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

const db::Operand* operand(const Launch& l, const std::string& name, db::OperandRole role,
                           const db::TraceReader& r) {
  for (const db::Operand& o : l.operands)
    if (o.role == role && r.str(o.name) == name) return &o;
  return nullptr;
}

// Whether deep_gpu_app's reallocation got the freed block's address back ("same_address 1"):
// only then do its zeros say that it was filled, and its old bytes that it was not.
bool sameAddress(const std::string& out) { return out.find("same_address 1\n") != std::string::npos; }

TEST(DeepGpu, RecordsParametersAndTheMemoryEachLaunchReaches) {
  DETRACE_REQUIRE_GPU();
  DeepRun run;
  ASSERT_NO_FATAL_FAILURE(recordApp("all", "launches:0:", run));
  const db::TraceReader& r = *run.reader;
  if (sameAddress(run.app_out)) {
    EXPECT_NE(run.app_out.find("nonzero_after_realloc 0\n"), std::string::npos)
        << "fresh memory was not zero-filled:\n" << run.app_out;
  } else {
    std::printf("note: cudaMalloc gave the reallocation other memory: the zero fill is not shown\n");
  }
  EXPECT_EQ(r.metaValue("deep_window"), "launches:0:");

  // axpy_struct's one parameter is a 24-byte struct {in, out, n, k}: both pointers are found.
  const Launch* axpy = run.first("axpy_struct");
  ASSERT_NE(axpy, nullptr);
  ASSERT_TRUE(axpy->params.has_value());
  auto layout = tracer::parseLayoutText(axpy->params->layout);
  ASSERT_TRUE(layout.has_value()) << axpy->params->layout;
  ASSERT_EQ(layout->size(), 1u);
  EXPECT_EQ((*layout)[0].size, 24u);
  ASSERT_EQ(axpy->params->bytes.size(), 24u);
  const db::Operand* in_pre = operand(*axpy, "arg0", db::OperandRole::kInput, r);
  const db::Operand* out_pre = operand(*axpy, "arg0+8", db::OperandRole::kInput, r);
  const db::Operand* out_post = operand(*axpy, "arg0+8", db::OperandRole::kOutput, r);
  ASSERT_TRUE(in_pre && out_pre && out_post) << "axpy_struct has " << axpy->operands.size() << " deep rows";
  uint64_t in_ptr = 0, out_ptr = 0;
  std::memcpy(&in_ptr, axpy->params->bytes.data(), 8);
  std::memcpy(&out_ptr, axpy->params->bytes.data() + 8, 8);
  EXPECT_EQ(static_cast<uint64_t>(in_pre->address), in_ptr);
  EXPECT_EQ(static_cast<uint64_t>(out_post->address), out_ptr);
  EXPECT_EQ(out_post->bytes, int64_t{4} << 20);

  // B before the launch: zero-filled; after it: the bytes the program copied out.
  std::vector<uint8_t> zeros(static_cast<size_t>(out_pre->bytes), 0);
  EXPECT_EQ(out_pre->digest, kernels::digestCpu(zeros.data(), zeros.size()));
  std::vector<uint8_t> b = readFile(std::filesystem::path(run.dir).parent_path() / "b.bin");
  ASSERT_EQ(static_cast<int64_t>(b.size()), out_post->bytes);
  EXPECT_EQ(out_post->digest, kernels::digestCpu(b.data(), b.size()));
  EXPECT_NE(out_pre->digest, out_post->digest);

  // consume's output D after it: the bytes the program copied out.
  const Launch* consume = run.first("consume");
  ASSERT_NE(consume, nullptr);
  const db::Operand* d_post = operand(*consume, "arg1", db::OperandRole::kOutput, r);
  ASSERT_NE(d_post, nullptr);
  std::vector<uint8_t> d = readFile(std::filesystem::path(run.dir).parent_path() / "d.bin");
  EXPECT_EQ(d_post->digest, kernels::digestCpu(d.data(), d.size()));

  // Every launch has its parameters and deep rows, the first one too (the tracer sets itself up
  // inside that launch's callback).
  for (const Launch& l : run.kernels) {
    EXPECT_TRUE(l.params.has_value()) << l.name;
    EXPECT_FALSE(l.operands.empty()) << l.name;
  }
  // The zero fill's memsets are the tracer's: only the program's two cudaMemsets are events.
  auto counts = run.reader->countsByKind();
  ASSERT_TRUE(counts.isOk());
  EXPECT_EQ((*counts)[db::EventKind::kMemset], 2);
  EXPECT_EQ((*counts)[db::EventKind::kKernel], 6);

  auto stats = run.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_GE((*stats)["tracer_own_records_dropped"], 7);
  EXPECT_GE((*stats)["deep_launches"], 6);
  EXPECT_GE((*stats)["deep_allocations_seen"], 7);
  EXPECT_GT((*stats)["deep_zero_filled_bytes"], int64_t{8} << 20);
  EXPECT_EQ((*stats)["deep_params_lost"], 0);
  EXPECT_EQ((*stats)["fingerprints_skipped_ring_full"], 0);
}

// The number deep_gpu_app printed after "nonzero_after_realloc " (-1: none).
long long nonzeroAfterRealloc(const std::string& out) {
  const std::string key = "nonzero_after_realloc ";
  size_t at = out.find(key);
  return at == std::string::npos ? -1 : std::atoll(out.c_str() + at + key.size());
}

// A process whose recording failed runs on unrecorded, as it would without the tracer: its new
// allocations are no longer zero-filled (nor synchronised for the fill). A file-size limit of
// 64 KiB leaves no room for the trace; the app waits 2 s after its first launch, long enough for
// the tracer to learn that, before it allocates, frees and allocates again (cudaMallocAsync: the
// pool may hand the same block back, where cudaMalloc gave fresh, zeroed pages on an H100). Each
// run says whether it got the same block; where it did not, its bytes say nothing of a fill.
TEST(DeepGpu, NothingIsZeroFilledOnceTheRecordingHasFailed) {
  DETRACE_REQUIRE_GPU();
  const std::string app = fmt::format("{}/tests/deep_gpu_app --realloc-after", DETRACE_BINARY_DIR);
  testing::ShellOutput plain = testing::runShell(app + " 2000");
  ASSERT_EQ(plain.status, 0) << plain.out;
  if (!sameAddress(plain.out) || nonzeroAfterRealloc(plain.out) <= 0) {
    GTEST_SKIP() << "without the tracer the stream-ordered pool did not hand the freed block "
                    "back here, so a zero fill cannot be told from fresh memory:\n"
                 << plain.out;
  }
  std::string base = tempDir("failed");
  testing::ShellOutput o = testing::runShell(fmt::format(
      "(ulimit -f 128; {}/replay/detrace record -o {}/run --deep launches:0: -- {} 2000)",
      DETRACE_BINARY_DIR, base, app));
  EXPECT_EQ(o.status, 0) << o.out;
  ASSERT_NE(o.out.find("cannot record this process"), std::string::npos) << o.out;
  if (!sameAddress(o.out)) {
    // Seen on an H100 (driver 580): with the recording failed, the reallocation came back
    // zeroed whether the fill ran or not (a mutant that kept filling gave the same).
    GTEST_SKIP() << "under the failed recording the pool gave the reallocation other memory, so "
                    "its bytes say nothing of a fill:\n"
                 << o.out;
  }
  EXPECT_GT(nonzeroAfterRealloc(o.out), 0) << "memory was zero-filled after the recording failed:\n"
                                           << o.out;
  // The same program recorded: the fill is there (so the check above can fail).
  testing::ShellOutput ok = testing::runShell(
      fmt::format("{}/replay/detrace record -o {}/run-ok --deep launches:0: -- {} 2000",
                  DETRACE_BINARY_DIR, base, app));
  ASSERT_EQ(ok.status, 0) << ok.out;
  if (sameAddress(ok.out)) {
    EXPECT_EQ(nonzeroAfterRealloc(ok.out), 0) << ok.out;
  } else {
    std::printf("note: the recorded run's reallocation got other memory: its fill is not shown\n");
  }
}

TEST(DeepGpu, StreamOrderedAllocationsAreTrackedAndZeroFilledOnTheirStream) {
  DETRACE_REQUIRE_GPU();
  DeepRun run;
  ASSERT_NO_FATAL_FAILURE(recordApp("async", "launches:0:", run, "--async"));
  if (sameAddress(run.app_out)) {
    EXPECT_NE(run.app_out.find("nonzero_after_realloc 0\n"), std::string::npos)
        << "pool memory handed back by cudaMallocAsync was not zero-filled:\n" << run.app_out;
  } else {
    // Its zeros would say nothing: fresh memory is zero too.
    std::printf("note: the pool gave the reallocation other memory: the zero fill is not shown\n");
  }
  const Launch* count = run.first("count_nonzero");
  ASSERT_NE(count, nullptr);
  const db::Operand* pre = operand(*count, "arg0", db::OperandRole::kInput, *run.reader);
  ASSERT_NE(pre, nullptr) << "the stream-ordered allocation was not tracked";
  EXPECT_EQ(pre->bytes, int64_t{4} << 20);
  std::vector<uint8_t> zeros(static_cast<size_t>(pre->bytes), 0);
  EXPECT_EQ(pre->digest, kernels::digestCpu(zeros.data(), zeros.size()));
  auto stats = run.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_GE((*stats)["deep_allocations_seen"], 3);
  EXPECT_GE((*stats)["deep_frees_seen"], 1);
}

// Mapped memory under the deep window. The zero fill takes a handle's memory at its first mapping
// only: mapped again (an alias, or unmapped and mapped back, as KV-cache page managers move pages),
// it holds the program's data. A piece mapped next to another is read by a digest only once this
// device has access to it: before, reading it faults the program's context (illegal address).
TEST(DeepGpu, MappedMemoryKeepsItsDataAndAPieceWithoutAccessIsNeverRead) {
  DETRACE_REQUIRE_GPU();
  for (const char* mode : {"alias", "move", "neighbour"}) {
    SCOPED_TRACE(mode);
    DeepRun run;
    ASSERT_NO_FATAL_FAILURE(recordApp(std::string("vmm-") + mode, "launches:0:", run, std::string("--vmm ") + mode));
    EXPECT_NE(run.app_out.find("vmm_sync 0\n"), std::string::npos) << run.app_out;
    EXPECT_NE(run.app_out.find("vmm_byte 0xab\n"), std::string::npos)
        << "the program's data in mapped memory was overwritten:\n" << run.app_out;
  }
}

// Managed memory is tracked (a launch's pointer into it is followed) but never zero-filled: a
// fill from the GPU would move every page of it to the device. The skip is counted.
TEST(DeepGpu, ManagedMemoryIsTrackedButNotZeroFilled) {
  DETRACE_REQUIRE_GPU();
  DeepRun run;
  ASSERT_NO_FATAL_FAILURE(recordApp("managed", "launches:0:", run, "--managed"));
  EXPECT_NE(run.app_out.find("managed_sum 12288\n"), std::string::npos) << run.app_out;
  const Launch* sum = run.first("sum_bytes");
  ASSERT_NE(sum, nullptr);
  const db::Operand* pre = operand(*sum, "arg0", db::OperandRole::kInput, *run.reader);
  ASSERT_NE(pre, nullptr) << "the managed allocation was not tracked";
  EXPECT_EQ(pre->bytes, int64_t{64} << 20);
  auto stats = run.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["deep_zero_fill_skipped_managed"], 1);
  // What was filled: the 8-byte result alone (and whatever the runtime allocates for itself), not
  // the 64 MiB.
  EXPECT_GT((*stats)["deep_zero_filled_bytes"], 0);
  EXPECT_LT((*stats)["deep_zero_filled_bytes"], int64_t{64} << 20);
}

// The deep counters count what they say: a kernel without parameters is not a kernel whose
// layout is unknown, and the digested bytes are those queued (a launch the driver refuses gets
// its digests before, not after).
TEST(DeepGpu, TheDeepCountersCountWhatTheySay) {
  DETRACE_REQUIRE_GPU();
  DeepRun run;
  ASSERT_NO_FATAL_FAILURE(recordApp("counts", "launches:0:", run, "--counts"));
  EXPECT_EQ(run.app_out.find("refused_launch 0\n"), std::string::npos) << run.app_out;
  EXPECT_NE(run.app_out.find("refused_launch "), std::string::npos) << run.app_out;
  auto stats = run.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["deep_launches_without_params"], 1);  // no_params
  EXPECT_EQ((*stats)["deep_no_param_layout"], 0);
  EXPECT_EQ((*stats)["deep_params_missing"], 0);
  EXPECT_EQ((*stats)["deep_params_too_large"], 0);
  EXPECT_EQ((*stats)["deep_pointer_words_ignored"], 0);
  EXPECT_EQ((*stats)["deep_launches"], 2);  // the two fill_bytes, the refused one too
  EXPECT_EQ((*stats)["deep_targets"], 2);
  // 4096 bytes before and after the first fill_bytes, before the refused one only.
  EXPECT_EQ((*stats)["deep_digested_bytes"], 3 * 4096);
}

TEST(DeepGpu, IpcImportedMemoryIsTrackedAndNeverZeroFilled) {
  DETRACE_REQUIRE_GPU();
  std::string base = tempDir("ipc");
  std::string handle = base + "/handle", app = fmt::format("{}/tests/deep_gpu_app", DETRACE_BINARY_DIR);
  DeepRun run;
  run.dir = base + "/run";
  // The exporter (not recorded) keeps its memory until the recorded importer is done.
  testing::ShellOutput o = testing::runShell(fmt::format(
      "{0} --ipc-export {1} & pid=$!; for i in $(seq 300); do [ -f {1} ] && break; sleep 0.1; done; "
      "{2}/replay/detrace record -o {3} --deep launches:0: -- {0} --ipc-import {1}; rc=$?; "
      "touch {1}.done; wait $pid; exit $rc",
      app, handle, DETRACE_BINARY_DIR, run.dir));
  ASSERT_EQ(o.status, 0) << o.out;
  std::vector<uint8_t> pattern(size_t{1} << 20);
  uint64_t sum = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    pattern[i] = static_cast<uint8_t>((i * 131u + 7u) >> 3);
    sum += pattern[i];
  }
  // The importer saw the exporter's bytes: the import was not zero-filled.
  EXPECT_NE(o.out.find(fmt::format("ipc_sum {}\n", sum)), std::string::npos) << o.out;
  ASSERT_NO_FATAL_FAILURE(loadRun(run));
  const Launch* reader = run.first("sum_bytes");
  ASSERT_NE(reader, nullptr);
  const db::Operand* pre = operand(*reader, "arg0", db::OperandRole::kInput, *run.reader);
  ASSERT_NE(pre, nullptr) << "the imported allocation was not tracked";
  ASSERT_GE(pre->bytes, int64_t{1} << 20);
  if (pre->bytes == int64_t{1} << 20) {
    EXPECT_EQ(pre->digest, kernels::digestCpu(pattern.data(), pattern.size()));
  } else {  // the driver reports the mapping's granularity-rounded extent: the pattern is a prefix
    EXPECT_EQ(pre->bytes % (int64_t{1} << 20), 0) << pre->bytes;
  }
  auto stats = run.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["deep_imports_seen"], 1);
}

TEST(DeepGpu, KernelWindowStartsAtTheNamedLaunch) {
  DETRACE_REQUIRE_GPU();
  DeepRun run;
  ASSERT_NO_FATAL_FAILURE(recordApp("kernel", "kernel:racy_bins@0+1", run));
  std::map<std::string, bool> deep;
  std::string listing;
  for (const Launch& l : run.kernels) {
    deep[l.name.substr(0, l.name.find('('))] |= !l.operands.empty();
    listing += fmt::format("  {} {}: {} deep rows, params {}\n", l.event.seq, l.name, l.operands.size(),
                           l.params ? l.params->layout : "none");
  }
  SCOPED_TRACE("kernels:\n" + listing);
  EXPECT_TRUE(deep["racy_bins"]);
  EXPECT_TRUE(deep["consume"]);
  EXPECT_FALSE(deep["axpy_struct"]);
  EXPECT_FALSE(deep["fill_wide"]);
}

TEST(DeepGpu, KernelWindowLooksBackAtTheLaunchesBeforeIt) {
  DETRACE_REQUIRE_GPU();
  DeepRun run;
  // Launch order: fill_bytes, count_nonzero, fill_wide, axpy_struct, racy_bins, consume.
  ASSERT_NO_FATAL_FAILURE(recordApp("lookback", "kernel:racy_bins@0-2+1", run));
  std::map<std::string, bool> deep;
  std::string listing;
  for (const Launch& l : run.kernels) {
    deep[l.name.substr(0, l.name.find('('))] |= !l.operands.empty() || l.params.has_value();
    listing += fmt::format("  {} {}: {} deep rows\n", l.event.seq, l.name, l.operands.size());
  }
  SCOPED_TRACE("kernels:\n" + listing);
  EXPECT_FALSE(deep["fill_bytes"]);
  EXPECT_FALSE(deep["count_nonzero"]);
  EXPECT_TRUE(deep["fill_wide"]);
  EXPECT_TRUE(deep["axpy_struct"]);
  EXPECT_TRUE(deep["racy_bins"]);
  EXPECT_TRUE(deep["consume"]);
  auto stats = run.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["deep_lookback_speculative"], 4);
  EXPECT_EQ((*stats)["deep_lookback_kept"], 2);
  EXPECT_GT((*stats)["deep_lookback_fingerprints_dropped"], 0);
}

// The launch that opens a look-back window may never be fingerprinted: captured into a CUDA graph,
// or outside --window. The launches held before it are still decided when it comes (and counted
// from it), not left held until the exit drops them.
TEST(DeepGpu, ALookBackWindowKeepsItsLaunchesWhenTheOpeningLaunchIsNotFingerprinted) {
  DETRACE_REQUIRE_GPU();
  struct Case {
    const char* mode;
    const char* deep;
    const char* record_args;
    std::vector<int> deep_fills;  // the fill values (fill_bytes' third parameter) fingerprinted
  };
  // deep_gpu_app --lookback: fill_bytes v = 1, 2, 3 (launches 0-2), opener (3), then (capture) a
  // graph launch and fill_bytes v = 5, or (plain) fill_bytes v = 4 and 5, left out by --window.
  const Case cases[] = {
      {"capture", "kernel:opener@0-2+2", "", {2, 3, 5}},
      {"plain", "kernel:opener@0-2+1", "--window launches:0:3", {2, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode);
    DeepRun run;
    ASSERT_NO_FATAL_FAILURE(recordApp(std::string("lookback-") + c.mode, c.deep, run,
                                      std::string("--lookback ") + c.mode, c.record_args));
    EXPECT_NE(run.app_out.find("lookback_byte 0x5\n"), std::string::npos) << run.app_out;
    std::vector<int> deep_fills;
    int fills = 0;
    std::string listing;
    for (const Launch& l : run.kernels) {
      listing += fmt::format("  {} {}: {} deep rows, params {}\n", l.event.seq, l.name,
                             l.operands.size(), l.params ? l.params->layout : "none");
      if (l.name.find("fill_bytes") == std::string::npos) continue;
      ++fills;
      if (!l.params) {
        EXPECT_TRUE(l.operands.empty());
        continue;
      }
      ASSERT_EQ(l.params->bytes.size(), 17u);  // (uint8_t* p, size_t n, uint8_t v)
      deep_fills.push_back(l.params->bytes[16]);
      EXPECT_EQ(l.operands.size(), 2u);  // p's allocation, before and after
    }
    SCOPED_TRACE("kernels:\n" + listing);
    EXPECT_EQ(fills, std::string(c.mode) == "capture" ? 4 : 3);
    EXPECT_EQ(deep_fills, c.deep_fills);
    auto stats = run.reader->stats();
    ASSERT_TRUE(stats.isOk());
    EXPECT_EQ((*stats)["deep_lookback_speculative"], 3);
    EXPECT_EQ((*stats)["deep_lookback_kept"], 2);
    // The captured cudaLaunchKernel is one launch: its driver half is not counted again (it would
    // move fill_bytes v = 5 out of the window).
    EXPECT_EQ((*stats)["launches_captured"], std::string(c.mode) == "capture" ? 1 : 0);
  }
}

TEST(DeepGpu, DiffNamesTheRacyKernelAsTheOrigin) {
  DETRACE_REQUIRE_GPU();
  DeepRun a, b;
  ASSERT_NO_FATAL_FAILURE(recordApp("diff-a", "launches:0:", a));
  ASSERT_NO_FATAL_FAILURE(recordApp("diff-b", "launches:0:", b));
  ASSERT_NE(a.app_out.substr(a.app_out.find("bins ")), b.app_out.substr(b.app_out.find("bins ")))
      << "the racy kernel gave the same bins twice (astronomically unlikely)";
  testing::ShellOutput o = testing::runShell(
      fmt::format("{}/replay/detrace diff --json {} {}", DETRACE_BINARY_DIR, a.dir, b.dir));
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_TRUE(j.contains("ranks") && j["ranks"].size() == 1 && j["ranks"][0].contains("deep")) << o.out;
  const auto& deep = j["ranks"][0]["deep"];
  ASSERT_TRUE(deep.contains("origin")) << deep.dump(1);
  EXPECT_NE(deep["origin"]["kernel"].get<std::string>().find("racy_bins"), std::string::npos) << deep.dump(1);
  EXPECT_EQ(deep["origin"]["args"], nlohmann::json::array({"arg2"})) << deep.dump(1);  // the bins
  EXPECT_EQ(deep["before_window"], false);
  EXPECT_EQ(deep["origins"], 1) << deep.dump(1);
  ASSERT_TRUE(deep.contains("first_propagated")) << deep.dump(1);
  EXPECT_NE(deep["first_propagated"]["kernel"].get<std::string>().find("consume"), std::string::npos);
  EXPECT_EQ(deep["counts"]["propagated"], 1) << deep.dump(1);
  testing::ShellOutput text = testing::runShell(
      fmt::format("{}/replay/detrace diff {} {}", DETRACE_BINARY_DIR, a.dir, b.dir));
  EXPECT_NE(text.out.find("racy_bins"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace detrace
