// Records a real CUDA program (tests/tracer/tracer_gpu_app.cu) with `detrace record` and checks
// the trace: every kernel with name, grid/block and GPU times in launch order, the graph's
// kernels with graph ids, and both cuBLASLt matmuls with their shape and algorithm, and the
// kernels they launched under them. Twice: kernels placed by correlation id (the default) and
// followed through launch callbacks (--launch-callbacks).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/gpu_test.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/kernels/digest.h"
#include "detrace/tracer/comm_registry.h"
#include "common/shell.h"

namespace detrace {
namespace {

int shell(const std::string& cmd, std::string& out) {
  testing::ShellOutput o = testing::runShell(cmd);
  out += o.out;
  return o.status;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Records tracer_gpu_app (`app_args` after it, `options` before --; with launch callbacks or
// placed by correlation id) and opens its one rank.
void recordApp(testing::TempDir& tmp, const std::string& options, const std::string& app_args, bool callbacks,
               std::unique_ptr<db::TraceReader>& reader) {
  std::string run = tmp.file("run"), out;
  int rc = shell(fmt::format("{0}/replay/detrace record -o {1}{2}{3} -- {0}/tests/tracer_gpu_app{4}",
                             DETRACE_BINARY_DIR, run, options, callbacks ? " --launch-callbacks" : "", app_args),
                 out);
  ASSERT_EQ(rc, 0) << out;
  auto r = db::Run::open(run);
  ASSERT_TRUE(r.isOk()) << r.status().message() << "\n" << out;
  ASSERT_EQ(r->ranks().size(), 1u);
  auto opened = r->openRank(r->ranks()[0].rank);
  ASSERT_TRUE(opened.isOk());
  reader = std::move(*opened);
}

void checkRecordedApp(bool callbacks) {
  testing::TempDir tmp;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp, "", "", callbacks, reader));
  db::TraceReader& t = *reader;
  EXPECT_FALSE(t.rank().gpu_name.empty());
  EXPECT_FALSE(t.metaValue("cuda_version").empty());
  EXPECT_EQ(t.metaValue("kernel_placement"), callbacks ? "callbacks" : "correlation");

  auto cursor = t.events();
  ASSERT_TRUE(cursor.isOk());
  std::vector<db::Event> kernels, gemm_events;
  std::vector<std::string> names;
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    const db::Event& e = cursor->event();
    if (e.kind == db::EventKind::kKernel) {
      kernels.push_back(e);
      names.push_back(t.str(e.name));
    } else if (e.kind == db::EventKind::kGemm) {
      gemm_events.push_back(e);
    }
  }
  // 1. The eight alternating launches, in launch order, with their configuration and GPU times.
  std::vector<std::string> plain;
  std::set<int64_t> streams;
  int64_t s1 = db::kUnset, s2 = db::kUnset;  // the streams of scale_kernel and add_one_kernel
  for (size_t i = 0; i < kernels.size(); ++i) {
    bool scale = contains(names[i], "scale_kernel"), add = contains(names[i], "add_one_kernel");
    if (!scale && !add) continue;
    plain.push_back(scale ? "scale" : "add");
    const db::Event& e = kernels[i];
    EXPECT_GT(e.gpu_start_ns, 0) << names[i];
    EXPECT_GE(e.gpu_end_ns, e.gpu_start_ns);
    EXPECT_EQ(e.launch.grid[0], scale ? 256 : 512);
    EXPECT_EQ(e.launch.block[0], scale ? 256 : 128);
    EXPECT_GT(e.launch.registers, 0);
    if (callbacks) {  // what only the launch callbacks see
      EXPECT_GT(e.cpu_ns, 0);
      EXPECT_EQ(e.launch.api, db::LaunchApi::kRuntime);
    } else {
      EXPECT_EQ(e.launch.api, db::LaunchApi::kUnknown);
    }
    streams.insert(e.stream);
    (scale ? s1 : s2) = e.stream;
  }
  std::vector<std::string> expected;
  for (int i = 0; i < 4; ++i) {
    expected.push_back("scale");
    expected.push_back("add");
  }
  EXPECT_EQ(plain, expected);
  EXPECT_EQ(streams.size(), 2u);

  // 2. The graph: three replays of two kernels, each with graph and node ids.
  int first = 0, second = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    bool g1 = contains(names[i], "graph_first_kernel"), g2 = contains(names[i], "graph_second_kernel");
    if (!g1 && !g2) continue;
    (g1 ? first : second)++;
    EXPECT_NE(kernels[i].graph_id, db::kUnset) << names[i];
    EXPECT_NE(kernels[i].graph_node_id, db::kUnset);
    EXPECT_EQ(kernels[i].launch.api, db::LaunchApi::kGraph);
    EXPECT_GT(kernels[i].gpu_start_ns, 0);
    EXPECT_EQ(kernels[i].stream, s2) << "the graph was launched on add_one_kernel's stream";
  }
  EXPECT_EQ(first, 3);
  EXPECT_EQ(second, 3);

  // 3. The two matmuls: shape, and an algorithm (heuristic for the first, the caller's for the
  //    second); the kernels they launched name them as parent.
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk());
  ASSERT_EQ(gemms->size(), 2u);
  for (const auto& [seq, g] : *gemms) {
    EXPECT_EQ(g.m, 256);
    EXPECT_EQ(g.n, 128);
    EXPECT_EQ(g.k, 64);
    EXPECT_EQ(g.a_dtype, db::DType::kF32);
    EXPECT_GE(g.algo_id, 0);
    EXPECT_EQ(t.str(g.compute_type), "CUBLAS_COMPUTE_32F");
    bool has_child = false;
    for (const db::Event& k : kernels) {
      if (k.parent_seq != seq) continue;
      has_child = true;
      EXPECT_EQ(k.stream, s1) << "a kernel of GEMM " << seq << " on another stream";
    }
    EXPECT_TRUE(has_child) << "no kernel names GEMM " << seq << " as parent";
  }
  // The matmuls ran on scale_kernel's stream: one stream in the trace for the calls and their
  // kernels, however the kernels were recorded.
  ASSERT_EQ(gemm_events.size(), 2u);
  for (const db::Event& g : gemm_events) EXPECT_EQ(g.stream, s1) << "GEMM " << g.seq;
  EXPECT_EQ((*gemms)[0].second.algo_source, 2);
  EXPECT_EQ((*gemms)[1].second.algo_source, 1);

  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["tracer_slots_timed_out"], 0);
  EXPECT_EQ((*stats)["events_dropped"], 0);
  if (callbacks) {
    EXPECT_EQ((*stats)["tracer_records_placed"], 0);
  } else {
    // Every plain kernel placed, none out of order; only the graph launches took a slot.
    EXPECT_GE((*stats)["tracer_records_placed"], 8);
    EXPECT_EQ((*stats)["tracer_records_placed_late"], 0);
    EXPECT_EQ((*stats)["tracer_records_placed_forced"], 0);
    EXPECT_GE((*stats)["tracer_records_placed_with_parent"], 2);
    EXPECT_EQ((*stats)["tracer_launches"], 3);
  }
}

// Two threads launching at once, each on its own stream: a plain kernel and a matmul, 200 times
// each. Every GEMM's kernels are on its stream and name it; neither thread's plain kernels name a
// GEMM, though the other thread's matmul calls were under way when many of them were launched.
void checkTwoThreads(bool callbacks) {
  testing::TempDir tmp;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp, " --capture meta", " threads 200", callbacks, reader));
  db::TraceReader& t = *reader;
  auto cursor = t.events();
  ASSERT_TRUE(cursor.isOk());
  std::map<int64_t, int64_t> gemm_stream;  // seq -> stream
  std::map<int64_t, int> children;
  int plain = 0, plain_with_gemm_parent = 0, gemm_kernels_elsewhere = 0;
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    const db::Event& e = cursor->event();
    if (e.kind == db::EventKind::kGemm) gemm_stream[e.seq] = e.stream;
    if (e.kind != db::EventKind::kKernel) continue;
    const bool is_plain = contains(t.str(e.name), "thread0_kernel") || contains(t.str(e.name), "thread1_kernel");
    auto g = gemm_stream.find(e.parent_seq);  // a parent is written before its kernels
    if (is_plain) {
      ++plain;
      plain_with_gemm_parent += g != gemm_stream.end();
    } else if (g != gemm_stream.end()) {
      ++children[e.parent_seq];
      gemm_kernels_elsewhere += e.stream != g->second;
    }
  }
  EXPECT_EQ(plain, 400);
  EXPECT_EQ(plain_with_gemm_parent, 0) << "plain kernels taken for a GEMM's";
  EXPECT_EQ(gemm_kernels_elsewhere, 0) << "a GEMM's kernels on another stream";
  EXPECT_EQ(gemm_stream.size(), 400u);
  int childless = 0;
  for (const auto& [seq, stream] : gemm_stream) childless += children[seq] == 0;
  EXPECT_EQ(childless, 0);
}

TEST(TracerGpu, TwoLaunchingThreadsKeepTheirOwnParents) {
  DETRACE_REQUIRE_GPU();
  checkTwoThreads(/*callbacks=*/false);
}

TEST(TracerGpu, TwoLaunchingThreadsKeepTheirOwnParentsWithLaunchCallbacks) {
  DETRACE_REQUIRE_GPU();
  checkTwoThreads(/*callbacks=*/true);
}

// cuBLASLt matmuls called without an algorithm (tracer_gpu_app lt-heuristic, four problems): each is
// recorded with the algorithm the tracer's heuristic query answered (with the caller's workspace),
// and the same problem run right after with the program's own heuristic's first answer launches
// the same kernels. So what was recorded is what ran, not only what the heuristic would say.
TEST(TracerGpu, AMatmulWithoutAnAlgorithmIsRecordedWithTheOneThatRan) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp, " --capture meta", " lt-heuristic", /*callbacks=*/false, reader));
  db::TraceReader& t = *reader;
  std::map<int64_t, std::vector<std::string>> children;  // GEMM seq -> its kernels' names
  auto cursor = t.events();
  ASSERT_TRUE(cursor.isOk());
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    const db::Event& e = cursor->event();
    if (e.kind == db::EventKind::kKernel && e.parent_seq != db::kUnset) children[e.parent_seq].push_back(t.str(e.name));
  }
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk());
  ASSERT_EQ(gemms->size(), 8u);
  for (size_t i = 0; i + 1 < gemms->size(); i += 2) {
    const auto& [seq_none, none] = (*gemms)[i];
    const auto& [seq_given, given] = (*gemms)[i + 1];
    SCOPED_TRACE(fmt::format("pair {}: m={} n={} k={}", i / 2, none.m, none.n, none.k));
    EXPECT_EQ(none.algo_source, 2);
    EXPECT_EQ(given.algo_source, 1);
    EXPECT_GE(none.algo_id, 0);
    auto algo = [](const db::Gemm& g) {
      return std::tuple(g.algo_id, g.tile, g.split_k, g.reduction_scheme, g.stages, g.swizzle, g.custom_option);
    };
    EXPECT_EQ(algo(none), algo(given));
    ASSERT_FALSE(children[seq_none].empty()) << "no kernel under GEMM " << seq_none;
    EXPECT_EQ(children[seq_none], children[seq_given]);
    std::string names;
    for (const std::string& n : children[seq_none]) names += (names.empty() ? "" : " + ") + n;
    std::printf("pair %zu: m=%lld n=%lld k=%lld algo %d tile %d split-k %d reduction %d stages %d: %s\n", i / 2,
                static_cast<long long>(none.m), static_cast<long long>(none.n), static_cast<long long>(none.k),
                none.algo_id, none.tile, none.split_k, none.reduction_scheme, none.stages, names.c_str());
  }
}

// A CUDA program whose trace outgrows its file-size limit (`ulimit -f`): recording stops, and
// CUPTI's records and launch callbacks with it (the flusher's failIfWriterStopped), while the
// program runs to its end; the file keeps what was committed and reads as unfinished. The CPU
// tests (cpu_write_failure_test.cc) cover the same without CUDA, where no flusher runs.
TEST(TracerGpu, AFileSizeLimitStopsTheRecordingAndCuptiNotTheProgram) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  std::string run = tmp.file("run"), out;
  // sh's `ulimit -f` counts 512-byte blocks: 8 MiB, far less than 2 x 120000 kernels and matmuls
  // need (about 300 bytes a round). Not less: one commit takes up to 32768 events (72 bytes each on
  // disk, bench_db_writer), and a first commit larger than the limit fails whole, leaving nothing
  // (2 MiB did on an H100, 2026-12-06). `meta`, as the matmuls' per-row digests would fill the
  // limit sooner. 120000 rounds, as with 20000 the limit came only in the exit's last commits, after
  // the program's work: too late to see recording stop while it runs.
  int rc = shell(fmt::format("(ulimit -f 16384; {0}/replay/detrace record --capture meta -o {1} -- "
                             "{0}/tests/tracer_gpu_app threads 120000)",
                             DETRACE_BINARY_DIR, run),
                 out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "tracer_gpu_app threads: done")) << out;
  EXPECT_TRUE(contains(out, "recording stopped: the trace could not be written")) << out;
  EXPECT_TRUE(contains(out, "file-size limit")) << out;
  EXPECT_TRUE(contains(out, "CUPTI's records and launch callbacks are off")) << out;
  auto r = db::Run::open(run);
  ASSERT_TRUE(r.isOk()) << r.status().message() << "\n" << out;
  ASSERT_EQ(r->ranks().size(), 1u);
  EXPECT_EQ(r->unfinishedFiles().size(), 1u);
  auto reader = r->openRank(r->ranks()[0].rank);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto counts = (*reader)->countsByKind();
  ASSERT_TRUE(counts.isOk()) << counts.status().message();
  // The matmuls are written as they are called; kernels come later, in CUPTI's activity buffers,
  // and an early limit (an H100 run, 2026-12-05) can stop the recording before the first buffer.
  auto gemms = (*counts)[db::EventKind::kGemm], kernels = (*counts)[db::EventKind::kKernel];
  EXPECT_GT(gemms, 0) << "nothing was committed before the limit (kernels: " << kernels << ")";
  EXPECT_LT(gemms, 240000) << "the limit was never reached (kernels: " << kernels << ")";
}

// A program that resets its device between cuBLASLt matmuls, recorded with CUPTI and without it
// (as where another profiler holds it). With CUPTI, the context-teardown callback settles the
// pending fingerprints and the matmuls after the reset get their own. Without it nothing would say
// that the fingerprints' result memory is freed: they are off, said so, and the program lives.
TEST(TracerGpu, ADeviceResetBetweenGemmsLeavesTheProgramWhole) {
  DETRACE_REQUIRE_GPU();
  for (bool cupti : {true, false}) {
    SCOPED_TRACE(cupti ? "with CUPTI" : "without CUPTI");
    testing::TempDir tmp;
    std::string run = tmp.file("run"), out;
    int rc = shell(fmt::format("{0}{1}/replay/detrace record -o {2} -- {1}/tests/tracer_gpu_app reset",
                               cupti ? "" : "DETRACE_CUPTI_LIB=/nonexistent/libcupti.so ",
                               DETRACE_BINARY_DIR, run),
                   out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(contains(out, "tracer_gpu_app reset: done")) << out;
    EXPECT_EQ(contains(out, "fingerprints are off"), !cupti) << out;
    auto reader = testing::openOnlyRank(run);
    ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << out;
    auto gemms = (*reader)->gemms();
    ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
    EXPECT_EQ(gemms->size(), 100u) << out;
    auto fingerprints = (*reader)->allOperandFingerprints();
    ASSERT_TRUE(fingerprints.isOk()) << fingerprints.status().message();
    if (!cupti) {
      EXPECT_TRUE(fingerprints->empty()) << fingerprints->size() << " fingerprints without CUPTI";
      continue;
    }
    // Both contexts' matmuls have digests: the second context's reuse nothing of the first's. A
    // reset right after the last matmul finds their ops not yet placed (kernels are placed by
    // correlation id, ~0.5 s later): their results are read out at the teardown and written
    // once the ops are placed.
    std::set<int64_t> digested;
    for (const db::Operand& o : *fingerprints) {
      if (o.has_digest) digested.insert(o.seq);
    }
    size_t with_digests = 0;
    for (const auto& [seq, g] : *gemms) with_digests += digested.count(seq);
    EXPECT_EQ(with_digests, gemms->size()) << out;
    EXPECT_TRUE(digested.count(gemms->front().first)) << out;
    EXPECT_TRUE(digested.count(gemms->back().first)) << out;
  }
}

// A driver error at the event that says when an op's digests end. Digests launched one by one
// (DETRACE_DIAG_DIGEST_MANY=0) take an event per op rather than a completion word; a matmul's
// operands are all digested after its call, in one enqueue, so the Nth event the tracer records
// is matmul N-1's. When the fourth fails, matmul 3's digests are queued but their end can never be
// known, and they may still write into their ring entries: the context's rings are never handed
// out again, so its later matmuls are recorded without fingerprints, said once, and counted. The
// program runs on, and after its cudaDeviceReset the new context fingerprints again. Every digest
// written equals every other of the same matrix (the program repeats one matmul on fixed
// inputs), so none was overwritten by a late digest.
TEST(TracerGpu, ADigestsDriverErrorGivesUpItsContextsRingsNotTheProgram) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  std::string run = tmp.file("run"), out;
  constexpr int kFailAt = 4;
  constexpr size_t kFailed = kFailAt - 1;  // the matmul whose event fails
  int rc = shell(fmt::format("DETRACE_DIAG_DIGEST_MANY=0 DETRACE_TEST_FAIL_EVENT_RECORD_AT={2} "
                             "LD_PRELOAD={0}/tests/libfail_event_record.so {0}/replay/detrace record "
                             "-o {1} -- {0}/tests/tracer_gpu_app reset",
                             DETRACE_BINARY_DIR, run, kFailAt),
                 out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(contains(out, "tracer_gpu_app reset: done")) << out;
  ASSERT_TRUE(contains(out, "cuEventRecord number 4 fails")) << "the fault was never injected\n" << out;
  EXPECT_TRUE(contains(out, "fingerprints are off in one CUDA context from here on")) << out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << out;
  auto gemms = (*reader)->gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  ASSERT_EQ(gemms->size(), 100u) << out;
  // Per matmul in call order: the names of its digested operands; per name, the digests seen.
  std::vector<std::set<std::string>> digested;
  std::map<std::string, std::set<uint64_t>> digests;
  for (const auto& [seq, g] : *gemms) {
    auto operands = (*reader)->operands(seq);
    ASSERT_TRUE(operands.isOk()) << operands.status().message();
    digested.emplace_back();
    for (const db::Operand& o : *operands) {
      if (!o.has_digest) continue;
      digested.back().insert((*reader)->str(o.name));
      digests[(*reader)->str(o.name)].insert(o.digest);
    }
  }
  const std::set<std::string> all = {"A", "B", "D"};
  for (size_t i = 0; i < kFailed; ++i) EXPECT_EQ(digested[i], all) << "matmul " << i << " before the error";
  for (size_t i = kFailed; i < 50; ++i) EXPECT_TRUE(digested[i].empty()) << "matmul " << i << " from the error on";
  for (size_t i = 50; i < 100; ++i) EXPECT_EQ(digested[i], all) << "matmul " << i << " in the new context";
  for (const auto& [name, seen] : digests) EXPECT_EQ(seen.size(), 1u) << name << " has differing digests";
  auto stats = (*reader)->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["fingerprint_contexts_rings_lost"], 1);
  EXPECT_EQ((*stats)["fingerprints_skipped_error"], 3) << "the failed matmul's A, B and D";
  EXPECT_EQ((*stats)["fingerprints_skipped_rings_lost"], static_cast<int64_t>(3 * (50 - kFailed - 1)));
}

// A program that holds CUPTI itself (a profiler subscribed before its first CUDA call): the
// tracer says so, records its GEMMs through the LD_PRELOAD layer (committed by the tracer's own
// commit thread, beside the program's CUPTI), and records no kernels and no fingerprints.
TEST(TracerGpu, AProgramThatHoldsCuptiIsRecordedWithoutKernels) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  std::string run = tmp.file("run"), out;
  int rc = shell(fmt::format("timeout 120 {0}/replay/detrace record -o {1} -- {0}/tests/tracer_gpu_app "
                             "held-cupti {2}",
                             DETRACE_BINARY_DIR, run, DETRACE_TEST_CUPTI_LIB),
                 out);
  EXPECT_EQ(rc, 0) << out;
  ASSERT_TRUE(contains(out, "the program's cuptiSubscribe returned 0")) << out;
  EXPECT_TRUE(contains(out, "tracer_gpu_app held-cupti: done")) << out;
  EXPECT_TRUE(contains(out, "another profiler (nsys, ncu, torch.profiler, ...) holds CUPTI")) << out;
  EXPECT_TRUE(contains(out, "fingerprints are off")) << out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << out;
  auto gemms = (*reader)->gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  EXPECT_EQ(gemms->size(), 50u) << out;
  for (const auto& [seq, g] : *gemms) {
    EXPECT_EQ(std::make_tuple(g.m, g.n, g.k), std::make_tuple(128, 128, 128)) << "GEMM at event " << seq;
  }
  auto counts = (*reader)->countsByKind();
  ASSERT_TRUE(counts.isOk()) << counts.status().message();
  EXPECT_EQ((*counts)[db::EventKind::kKernel], 0) << "kernels recorded without CUPTI";
  auto fingerprints = (*reader)->allOperandFingerprints();
  ASSERT_TRUE(fingerprints.isOk()) << fingerprints.status().message();
  EXPECT_TRUE(fingerprints->empty()) << fingerprints->size() << " fingerprints without CUPTI";
}

// NCCL's newer ways to make a communicator, with the real NCCL on one GPU: an all-reduce on a
// communicator from ncclCommInitRankScalable, one from ncclCommInitAll and one from
// ncclCommShrink of that one. Each names its own communicator, as rank 0 of 1 and its first call,
// and the scalable one's id is the hash of the root's unique id that the program printed. A group
// ended by ncclGroupSimulateEnd between them is not written, and gives its number back; a split
// inside a group, whose handle NCCL gives only at the group end, is followed, and a communicator
// initialized inside a group gets its device.
TEST(TracerGpu, CommunicatorsFromScalableInitAndShrinkAreFollowed) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  std::string run = tmp.file("run"), out;
  int rc = shell(fmt::format("timeout 120 {0}/replay/detrace record -o {1} -- {0}/tests/tracer_gpu_app nccl-comms",
                             DETRACE_BINARY_DIR, run),
                 out);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(contains(out, "ncclGroupSimulateEnd returned 0")) << out;
  // NCCL 2.28.3 refuses to shrink a communicator by no rank (ncclInvalidArgument, 4), and one GPU
  // has no rank to spare: the shrink's path with the real NCCL needs two GPUs.
  const bool shrunk = contains(out, "ncclCommShrink returned 0");
  if (!shrunk) {
    ASSERT_TRUE(contains(out, "ncclCommShrink returned 4")) << out;
  }
  const size_t expected = shrunk ? 7 : 6;
  // A split of a non-blocking communicator: NCCL 2.28.3 returns ncclSuccess and writes the handle
  // later, from its own thread (seen on an H100).
  const bool late = contains(out, "gave its communicator later");
  if (!late) {
    ASSERT_TRUE(contains(out, "split of a non-blocking communicator returned")) << out;
  }
  const std::string key = "unique id ";
  const size_t at = out.find(key);
  ASSERT_NE(at, std::string::npos) << out;
  std::array<uint8_t, 128> id{};
  for (size_t i = 0; i < id.size(); ++i) {
    id[i] = static_cast<uint8_t>(std::stoi(out.substr(at + key.size() + 2 * i, 2), nullptr, 16));
  }
  const int64_t scalable_id = tracer::CommRegistry::idFromUniqueId(id);
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk()) << colls.status().message();
  ASSERT_EQ(colls->size(), expected) << out;  // the simulated group's all-reduce (2500) is not written
  std::map<int64_t, db::Collective> by_count;
  for (const auto& [seq, c] : *colls) by_count[c.count] = c;
  ASSERT_EQ(by_count.size(), expected);
  ASSERT_EQ(by_count.count(2500), 0u);
  ASSERT_EQ(by_count.count(3000), shrunk ? 1u : 0u);
  for (const auto& [count, c] : by_count) {
    SCOPED_TRACE(count);
    EXPECT_EQ(c.op, db::CollOp::kAllReduce);
    EXPECT_EQ(c.comm_rank, 0);
    EXPECT_EQ(c.comm_nranks, 1);
    EXPECT_EQ(c.group_id, db::kUnset);
    EXPECT_EQ(c.comm_seq, count == 1500 ? 1 : 0);  // the simulated call's number was given back
    EXPECT_GE(c.comm_id, 0);
  }
  EXPECT_EQ(by_count[1000].comm_id, scalable_id);
  EXPECT_NE(by_count[2000].comm_id, scalable_id);
  EXPECT_EQ(by_count[1500].comm_id, by_count[2000].comm_id);
  // The split made inside a group, whose handle NCCL wrote at the group end.
  ASSERT_EQ(by_count.count(1200), 1u);
  EXPECT_NE(by_count[1200].comm_id, by_count[2000].comm_id);
  EXPECT_NE(by_count[1200].comm_id, scalable_id);
  // The communicator initialized inside a group: an id of its own, and the device NCCL gives at
  // its first call (it has none before the group end).
  ASSERT_EQ(by_count.count(1100), 1u);
  EXPECT_NE(by_count[1100].comm_id, by_count[2000].comm_id);
  EXPECT_NE(by_count[1100].comm_id, scalable_id);
  // The split of the non-blocking communicator: followed at its first call, from the slot NCCL
  // wrote its handle to.
  ASSERT_EQ(by_count.count(1300), 1u);
  const std::set<int64_t> ids = {by_count[1000].comm_id, by_count[2000].comm_id, by_count[1200].comm_id,
                                 by_count[1100].comm_id, by_count[1300].comm_id};
  EXPECT_EQ(ids.size(), 5u) << "every communicator has an id of its own";
  for (const auto& [seq, c] : *colls) {
    auto e = (*reader)->event(seq);
    ASSERT_TRUE(e.isOk()) << e.status().message();
    EXPECT_EQ(e->device, 0) << "the all-reduce of " << c.count;
  }
  if (shrunk) {
    EXPECT_NE(by_count[3000].comm_id, by_count[2000].comm_id);
  }
  auto stats = (*reader)->stats();
  ASSERT_TRUE(stats.isOk()) << stats.status().message();
  EXPECT_EQ((*stats)["tracer_ops_discarded"], 1);
  EXPECT_EQ((*stats)["nccl_comms_followed_late"], late ? 1 : 0) << out;
  EXPECT_EQ((*stats)["nccl_comms_unfollowed"], 0) << out;
  EXPECT_EQ((*reader)->rank().world_size, 1);
}

// Records tests/nccl_async_gpu_app (one all-reduce of random length through the stand-in of
// tests/tracer/fake_nccl_async.cu; `mode`: its third argument) and checks the one collective and
// its send and receive digests against the CPU twin's digests of what the program wrote (the
// receive buffer poisoned first); `returned`: what the all-reduce call must have answered.
struct AsyncAllReduce {
  std::map<std::string, int64_t> stats;
};

void recordAsyncAllReduce(const std::string& mode, int returned, AsyncAllReduce& r) {
  testing::TempDir tmp;
  std::string run = tmp.file("run"), out;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const size_t n = 3000 + rng.seed() % 5000;
  const uint64_t seed = rng.seed();
  int rc = shell(fmt::format("timeout 120 {0}/replay/detrace record -o {1} -- {0}/tests/nccl_async_gpu_app {2} {3} {4}",
                             DETRACE_BINARY_DIR, run, n, seed, mode),
                 out);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(contains(out, fmt::format("the all-reduce returned {}, done", returned).c_str())) << out;
  std::vector<float> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) {
    send[i] = static_cast<float>((i * 2654435761ull + seed) % 1000) * 0.25f;
    recv[i] = 2.0f * send[i];
  }
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk()) << colls.status().message();
  ASSERT_EQ(colls->size(), 1u) << out;
  const auto& [seq, c] = colls->front();
  EXPECT_EQ(c.count, static_cast<int64_t>(n));
  EXPECT_EQ(c.comm_seq, 0);
  EXPECT_EQ(c.comm_nranks, 1);
  auto operands = (*reader)->operands(seq);
  ASSERT_TRUE(operands.isOk()) << operands.status().message();
  std::map<std::string, db::Operand> by_name;
  for (const db::Operand& o : *operands) by_name[(*reader)->str(o.name)] = o;
  ASSERT_EQ(by_name.count("send"), 1u) << "no input digest\n" << out;
  ASSERT_EQ(by_name.count("recv"), 1u) << "no output digest\n" << out;
  EXPECT_EQ(by_name["send"].digest, kernels::digestCpu(send.data(), n * sizeof(float)));
  EXPECT_EQ(by_name["recv"].digest, kernels::digestCpu(recv.data(), n * sizeof(float)))
      << "the output was fingerprinted before the kernel that writes it";
  auto stats = (*reader)->stats();
  ASSERT_TRUE(stats.isOk()) << stats.status().message();
  r.stats = *stats;
}

// A non-blocking communicator's collective that NCCL makes on its own thread after answering
// ncclInProgress (its first, which connects peers; tests/tracer/fake_nccl_async.cu stands in for
// NCCL and launches a real kernel late): its output is fingerprinted once NCCL says the
// communicator is ready, after the kernel, not when the call returned, when the receive buffer
// still held the program's poison.
TEST(TracerGpu, InProgressCollectivesAreFingerprintedAfterNcclMakesThem) {
  DETRACE_REQUIRE_GPU();
  AsyncAllReduce r;
  ASSERT_NO_FATAL_FAILURE(recordAsyncAllReduce("", 7, r));  // ncclInProgress
  EXPECT_EQ(r.stats["nccl_calls_in_progress"], 1);
}

// One thread driving several GPUs calls each communicator's collective with another device's
// context current (NCCL's group of one communicator per device, without cudaSetDevice between):
// here a second context of the one GPU is current while the all-reduce (the stand-in, which like
// NCCL launches in its stream's context) runs on a stream of the primary one. The digests are
// taken in the stream's context, so both buffers have them, equal to the CPU twin's.
TEST(TracerGpu, AnOpOnAStreamOfAnotherContextIsFingerprintedInThatContext) {
  DETRACE_REQUIRE_GPU();
  AsyncAllReduce r;
  ASSERT_NO_FATAL_FAILURE(recordAsyncAllReduce("other-context", 0, r));
  EXPECT_EQ(r.stats["fingerprints_skipped_error"], 0);
}

// GEMMs called from a thread on which no context is current when the call begins (its first CUDA
// work) get every operand's fingerprint, taken after the call: inputs too, not only the output.
TEST(TracerGpu, GemmsOfAThreadsFirstCudaWorkHaveTheirInputsFingerprinted) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp, "", " fresh-thread", /*callbacks=*/false, reader));
  auto gemms = reader->gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  ASSERT_EQ(gemms->size(), 3u);
  for (const auto& [seq, g] : *gemms) {
    auto operands = reader->operands(seq);
    ASSERT_TRUE(operands.isOk()) << operands.status().message();
    std::set<std::string> digested;
    for (const db::Operand& o : *operands) {
      if (o.has_digest) digested.insert(reader->str(o.name));
    }
    EXPECT_EQ(digested, (std::set<std::string>{"A", "B", "D"})) << "GEMM at event " << seq;  // C is D
  }
}

TEST(TracerGpu, RecordsKernelsGraphsAndGemmsInLaunchOrder) {
  DETRACE_REQUIRE_GPU();
  checkRecordedApp(/*callbacks=*/false);
}

TEST(TracerGpu, RecordsKernelsGraphsAndGemmsInLaunchOrderWithLaunchCallbacks) {
  DETRACE_REQUIRE_GPU();
  checkRecordedApp(/*callbacks=*/true);
}

}  // namespace
}  // namespace detrace
