// `detrace record` end to end without a GPU: the launcher (exit status, manifest, refusals) and
// the LD_PRELOAD seam (programs linked against a fake libnccl or a fake cuBLAS are recorded by the
// real tracer).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <random>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/tracer/capture_policy.h"
#include "common/shell.h"

namespace detrace {
namespace {

using testing::TempDir;

using Output = testing::ShellOutput;
Output sh(const std::string& cmd) { return testing::runShell(cmd); }

std::string detrace() { return std::string(DETRACE_BINARY_DIR) + "/replay/detrace"; }

TEST(Record, PropagatesExitStatusAndWritesManifest) {
  TempDir tmp;
  std::string run = tmp.file("run");
  Output o = sh(fmt::format("CUDA_VISIBLE_DEVICES=1 NCCL_ALGO=Ring {} record -o {} -- /bin/sh -c 'exit 3'",
                            detrace(), run));
  EXPECT_EQ(o.status, 3) << o.out;
  auto m = db::readManifest(run);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->exit_code, 3);
  EXPECT_GT(m->end_time_ns, m->start_time_ns);
  EXPECT_EQ(m->command, (std::vector<std::string>{"/bin/sh", "-c", "exit 3"}));
  EXPECT_EQ(m->env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(m->env["NCCL_ALGO"], "Ring");
  EXPECT_EQ(m->env.count("PATH"), 0u);
  EXPECT_FALSE(m->options["tracer_library"].empty());
}

// A command's arguments are bytes, not always UTF-8 (a Latin-1 file name): the command runs with
// them unchanged and the manifest is written, with U+FFFD in their place (it is JSON).
TEST(Record, ArgumentsThatAreNotUtf8RunAndAreWrittenToTheManifest) {
  TempDir tmp;
  std::string run = tmp.file("run");
  std::mt19937 rng{std::random_device{}()};
  const int lone = 0x80 + static_cast<int>(rng() % 0x40);  // a continuation byte alone: never UTF-8
  const int status = 1 + static_cast<int>(rng() % 100);
  const std::string arg = fmt::format("caf\\{:03o}", lone);  // printf's octal escape (dash has no \\x)
  Output o = sh(fmt::format("{} record -o {} -- /bin/sh -c 'printf %s \"$0\" | od -An -tx1; exit {}' "
                            "\"$(printf '{}')\"", detrace(), run, status, arg));
  EXPECT_EQ(o.status, status) << o.out;
  EXPECT_NE(o.out.find(fmt::format("63 61 66 {:02x}", lone)), std::string::npos)
      << "the program got the byte unchanged: " << o.out;
  auto m = db::readManifest(run);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->exit_code, status);
  ASSERT_EQ(m->command.size(), 4u);
  EXPECT_EQ(m->command[3], "caf\xef\xbf\xbd");
}

TEST(Record, ChildSeesTheInjectionEnvironment) {
  TempDir tmp;
  std::string run = tmp.file("run");
  Output o = sh(fmt::format(
      "{} record -o {} -- /bin/sh -c 'echo \"[$DETRACE_OUT_DIR] [$CUDA_INJECTION64_PATH] [$LD_PRELOAD]\"'",
      detrace(), run));
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("[" + std::filesystem::absolute(run).string() + "]"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("libdetrace_tracer.so] ["), std::string::npos) << o.out;
}

// The tracer settings README lists reach the recorded command; those record sets from its options
// are not taken from the user's environment, where a stale one would override the options.
TEST(Record, UserTracerSettingsReachTheChild) {
  TempDir tmp;
  Output o = sh(fmt::format(
      "DETRACE_RECORDS_HOLD_MS=250 DETRACE_CAPTURE_STAGING_MB=8 DETRACE_GRAPH_RESULTS_MB=32 "
      "DETRACE_ZEROED_BUFFERS=0 DETRACE_DIAG_TIMING=1 DETRACE_WINDOW=steps:1:2 "
      "DETRACE_EXIT_TIMEOUT_S=7 DETRACE_CONTROL=0 DETRACE_DIGEST_WIDE=deep DETRACE_PAUSED=1 "
      "DETRACE_CAPTURE_OPS=gemm DETRACE_LAUNCH_CALLBACKS=1 CUDA_INJECTION64_PATH=/stale.so "
      "{} record -o {} -- /bin/sh -c 'echo \"[$DETRACE_RECORDS_HOLD_MS] [$DETRACE_CAPTURE_STAGING_MB] "
      "[$DETRACE_GRAPH_RESULTS_MB] [$DETRACE_ZEROED_BUFFERS] [$DETRACE_DIAG_TIMING] [w=$DETRACE_WINDOW] "
      "[$DETRACE_EXIT_TIMEOUT_S] [$DETRACE_CONTROL] [$DETRACE_DIGEST_WIDE] "
      "[p=$DETRACE_PAUSED] [o=$DETRACE_CAPTURE_OPS] [l=$DETRACE_LAUNCH_CALLBACKS] "
      "[i=$CUDA_INJECTION64_PATH]\"'",
      detrace(), tmp.file("run")));
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("[250] [8] [32] [0] [1] [w=] [7] [0] [deep] [p=] [o=] [l=]"), std::string::npos)
      << o.out;
  EXPECT_EQ(o.out.find("[i=/stale.so]"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("libdetrace_tracer.so]"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("CUDA_INJECTION64_PATH=/stale.so is set"), std::string::npos)
      << "replaced with a warning: " << o.out;
}

TEST(Record, CaptureLevelReachesTheChildAndTheManifest) {
  TempDir tmp;
  Output meta = sh(fmt::format("{} record -o {} --capture meta -- /bin/sh -c 'echo \"[$DETRACE_DIGEST]\"'",
                               detrace(), tmp.file("meta")));
  EXPECT_EQ(meta.status, 0) << meta.out;
  EXPECT_NE(meta.out.find("[0]"), std::string::npos) << meta.out;  // fingerprints off
  EXPECT_EQ(db::readManifest(tmp.file("meta"))->options.at("capture"), "meta");
  Output digest = sh(fmt::format("DETRACE_DIGEST=0 {} record -o {} -- /bin/sh -c 'echo \"[$DETRACE_DIGEST]\"'",
                                 detrace(), tmp.file("digest")));
  EXPECT_EQ(digest.status, 0) << digest.out;
  EXPECT_NE(digest.out.find("[]"), std::string::npos) << "the default (digest) must not inherit a stale "
                                                          "DETRACE_DIGEST=0: " << digest.out;
  Output full = sh(fmt::format(
      "{} record -o {} --capture full --capture-ops AllReduce,gemm --capture-range 4:9 "
      "--max-capture-bytes 64M --window steps:1:3 -- /bin/sh -c "
      "'echo \"[$DETRACE_CAPTURE|$DETRACE_CAPTURE_OPS|$DETRACE_CAPTURE_RANGE|$DETRACE_MAX_CAPTURE_BYTES|$DETRACE_WINDOW]\"'",
      detrace(), tmp.file("full")));
  EXPECT_EQ(full.status, 0) << full.out;
  EXPECT_NE(full.out.find("[full|AllReduce,gemm|4:9|67108864|steps:1:3]"), std::string::npos) << full.out;
  auto manifest = db::readManifest(tmp.file("full"));
  ASSERT_TRUE(manifest.isOk());
  EXPECT_EQ(manifest->options.at("capture_range"), "4:9");
  EXPECT_EQ(manifest->options.at("window"), "steps:1:3");
  EXPECT_EQ(manifest->options.at("row_digests"), "tokens");
  Output all = sh(fmt::format("{} record -o {} --row-digests all -- /bin/sh -c "
                              "'echo \"[$DETRACE_ROW_DIGESTS]\"'",
                              detrace(), tmp.file("all")));
  EXPECT_EQ(all.status, 0) << all.out;
  EXPECT_NE(all.out.find("[all]"), std::string::npos) << all.out;
  EXPECT_EQ(db::readManifest(tmp.file("all"))->options.at("row_digests"), "all");
  EXPECT_EQ(db::readManifest(tmp.file("all"))->options.at("graph_weights_every"), "1");
  Output every = sh(fmt::format("{} record -o {} --graph-weights-every 64 -- /bin/sh -c "
                                "'echo \"[$DETRACE_GRAPH_WEIGHTS_EVERY]\"'",
                                detrace(), tmp.file("every")));
  EXPECT_EQ(every.status, 0) << every.out;
  EXPECT_NE(every.out.find("[64]"), std::string::npos) << every.out;
  EXPECT_EQ(db::readManifest(tmp.file("every"))->options.at("graph_weights_every"), "64");
}

// Capture options are checked before anything starts, with a message that says what to write.
TEST(Record, RefusesBadCaptureOptions) {
  TempDir tmp;
  struct Case {
    const char* options;
    const char* says;
  } cases[] = {
      {"--capture-range 1:5", "add --capture full"},
      {"--capture full --capture-range 9:2", "empty"},
      {"--capture full --capture-ops ,", "selects nothing"},
      {"--capture full --capture-ops gemm,AllReduse", "did you mean AllReduce?"},
      {"--window minutes:1:2", "steps:A:B"},
      {"--window steps", "no range"},
      {"--capture everything", "capture"},
      {"--deep kernel:racy", "kernel:NAME@N"},
      {"--deep ops:4:6 --capture meta", "needs --capture digest"},
      {"--deep ops:4:6 --paused", "cannot be combined with --paused"},
      {"--window launches:x", "--window:"},
      {"--window kernel:racy@2-4", "cannot look back"},
      {"--row-digests weights", "--row-digests"},
      {"--graph-weights-every 0", "--graph-weights-every"},
      {"--graph-weights-every often", "--graph-weights-every"},
      {"--graph-weights-every 4 --capture meta", "needs --capture digest"},
      {"--graph-weights-every 4 --row-digests all", "drop one of the two"},
      {"--capture full --max-capture-bytes 0",
       "0 would copy nothing; for fingerprints alone use --capture digest"},
      {"--max-capture-bytes 0", "must be a positive size"},
      {"--capture full --max-capture-bytes 9999999999999999999999", "larger than any memory"},
      {"--queue abc", "must be a whole number"},
      {"--graph-weights-every x1", "must be a whole number"},
  };
  for (const Case& c : cases) {
    Output o = sh(fmt::format("{} record -o {} {} -- /bin/true", detrace(), tmp.file("r"), c.options));
    EXPECT_EQ(o.status, 2) << c.options << "\n" << o.out;
    EXPECT_NE(o.out.find(c.says), std::string::npos) << c.options << "\n" << o.out;
    EXPECT_FALSE(std::filesystem::exists(tmp.file("r") + "/manifest.json")) << c.options;
  }
}

TEST(Record, KilledCommandGives128PlusSignal) {
  TempDir tmp;
  Output o = sh(fmt::format("{} record -o {} -- /bin/sh -c 'kill -TERM $$'", detrace(), tmp.file("run")));
  EXPECT_EQ(o.status, 128 + 15) << o.out;
}

TEST(Record, RefusesNonEmptyDirectoryUnlessForced) {
  TempDir tmp;
  std::ofstream(tmp.file("something")) << "x";
  Output o = sh(fmt::format("{} record -o {} -- /bin/true", detrace(), tmp.path().string()));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.out.find("is not empty"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("--force"), std::string::npos) << o.out;
  o = sh(fmt::format("{} record -o {} --force -- /bin/true", detrace(), tmp.path().string()));
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_TRUE(db::readManifest(tmp.path().string()).isOk());
}

TEST(Record, ClearErrors) {
  TempDir tmp;
  Output o = sh(fmt::format("{} record -o {} -- no-such-command-xyz", detrace(), tmp.file("a")));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.out.find("no-such-command-xyz: command not found"), std::string::npos) << o.out;
  o = sh(fmt::format("{} record -o {}", detrace(), tmp.file("b")));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.out.find("after --"), std::string::npos) << o.out;
  o = sh(fmt::format("{} record -o {} /bin/true", detrace(), tmp.file("c")));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.out.find("after --"), std::string::npos) << o.out;
  o = sh(fmt::format("{} record -o /proc/detrace-cannot-write -- /bin/true", detrace()));
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.out.find("cannot create"), std::string::npos) << o.out;
  o = sh(fmt::format("{} record --help", detrace()));
  EXPECT_EQ(o.status, 0);
  EXPECT_NE(o.out.find("Examples:"), std::string::npos) << o.out;
}

// The real interposer records NCCL calls of a program linked against a fake libnccl: two ranks of
// a 4-rank world, started by one shell, each writing its own file.
// A program that calls NCCL only through dlsym on a handle of its own (Python's ctypes, as vLLM's
// and SGLang's pynccl do) is recorded like one linked to it: the tracer's dlsym hands out its
// wrappers for NCCL's entry points. dlsym(RTLD_NEXT, ...) still searches after the program, not
// after the tracer (the wrapper comes next, not NCCL).
TEST(RecordSeam, NcclCalledThroughDlsymOnItsOwnHandleIsRecorded) {
  TempDir tmp;
  std::string run = tmp.file("run");
  Output o = sh(fmt::format("timeout 60 {} record -o {} -- {}/tests/dlopen_nccl_app {}/tests/libnccl_detrace_fake.so",
                            detrace(), run, DETRACE_BINARY_DIR, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("ncclAllReduce through the handle: " + std::string(DETRACE_BINARY_DIR) +
                       "/tracer/libdetrace_tracer.so"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("ncclAllReduce through RTLD_NEXT: " + std::string(DETRACE_BINARY_DIR) +
                       "/tracer/libdetrace_tracer.so"),
            std::string::npos)
      << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk()) << colls.status().message();
  ASSERT_EQ(colls->size(), 2u) << o.out;
  for (size_t i = 0; i < 2; ++i) {
    const db::Collective& c = (*colls)[i].second;
    EXPECT_EQ(c.op, db::CollOp::kAllReduce);
    EXPECT_EQ(c.count, i == 0 ? 31 : 37);
    EXPECT_EQ(c.comm_seq, static_cast<int64_t>(i));
    EXPECT_EQ(c.comm_rank, 1);
    EXPECT_EQ(c.comm_nranks, 4);
    EXPECT_GE(c.comm_id, 0);
    EXPECT_EQ((*reader)->str(c.algo), "Ring");  // NCCL's choice, through the profiler plugin
  }
  EXPECT_EQ((*reader)->rank().world_size, 4);
}

// cuBLAS loaded by the program itself and called through dlsym on its handle (XLA's loader,
// Python's ctypes) is recorded like a linked call: the tracer's dlsym hands out its wrapper.
TEST(RecordSeam, CublasCalledThroughDlsymOnItsOwnHandleIsRecorded) {
  TempDir tmp;
  std::string run = tmp.file("run");
  Output o = sh(fmt::format("timeout 60 {} record -o {} -- {}/tests/dlopen_cublas_app {}/tests/libcublas_detrace_fake.so",
                            detrace(), run, DETRACE_BINARY_DIR, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("cublasSgemm_v2 through the handle: " + std::string(DETRACE_BINARY_DIR) +
                       "/tracer/libdetrace_tracer.so"),
            std::string::npos)
      << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto gemms = (*reader)->gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  ASSERT_EQ(gemms->size(), 1u) << o.out;
  const db::Gemm& g = gemms->front().second;
  EXPECT_EQ((*reader)->str(g.api), "cublasSgemm");
  EXPECT_EQ(g.m, 3);
  EXPECT_EQ(g.n, 5);
  EXPECT_EQ(g.k, 7);
  EXPECT_EQ(g.lda, 3);
  EXPECT_EQ(g.ldb, 7);
}

// The all-reduce counts of each process's trace file in a run, by pid.
std::map<int64_t, std::vector<int64_t>> allReduceCountsByPid(const std::string& run) {
  std::map<int64_t, std::vector<int64_t>> by_pid;
  for (const auto& entry : std::filesystem::directory_iterator(run)) {
    if (entry.path().extension() != ".dtrace") continue;
    auto reader = db::TraceReader::open(entry.path().string());
    EXPECT_TRUE(reader.isOk()) << entry.path() << ": " << reader.status().message();
    if (!reader.isOk()) continue;
    auto colls = (*reader)->collectives();
    EXPECT_TRUE(colls.isOk()) << colls.status().message();
    if (!colls.isOk()) continue;
    std::vector<int64_t>& counts = by_pid[(*reader)->rank().pid];
    for (const auto& [seq, c] : *colls) counts.push_back(c.count);
  }
  return by_pid;
}

// A child forked from a recorded process that goes on making calls without exec records them
// into a file of its own, and the parent's trace stays its own. The fork comes 1 s after the
// parent's first call, when its writer has long made the file and committed that call (500 ms
// at most) and has nothing to write: not inside SQLite (the next test forks while it is).
// On a loaded machine the writer may still be busy at the fork, and the child then rightly
// declines to record (the next test's case): the program is run again, three times at most.
TEST(RecordSeam, AForkedChildRecordsIntoItsOwnFile) {
  TempDir tmp;
  std::string run;
  Output o;
  for (int attempt = 0; attempt < 3; ++attempt) {
    run = tmp.file(fmt::format("run{}", attempt));
    o = sh(fmt::format("timeout 60 {} record -o {} -- {}/tests/fork_seam_app 1000", detrace(), run,
                       DETRACE_BINARY_DIR));
    if (o.out.find("not recording this process: it was forked while") == std::string::npos) break;
  }
  ASSERT_EQ(o.status, 0) << o.out;
  ASSERT_NE(o.out.find("fork_seam_app: parent"), std::string::npos) << o.out;
  auto by_pid = allReduceCountsByPid(run);
  ASSERT_EQ(by_pid.size(), 2u) << o.out;
  std::set<std::vector<int64_t>> traces;
  for (const auto& [pid, counts] : by_pid) traces.insert(counts);
  EXPECT_EQ(traces, (std::set<std::vector<int64_t>>{{101, 303}, {202, 202}})) << o.out;
}

// A child forked while the parent's trace writer is inside SQLite must never call SQLite: the
// parent's writer thread may have held SQLite's process-wide locks, which no thread of the child
// can release, so its first SQLite call could wait forever. The writer is made to hold inside its
// first batch for 1.5 s (DETRACE_DIAG_WRITER_HOLD_MS) and the program forks 400 ms in: the child
// runs on unrecorded, says so, and ends; the parent's trace is whole.
TEST(RecordSeam, AChildForkedWhileTheWriterIsInsideSqliteRunsUnrecorded) {
  TempDir tmp;
  std::string run = tmp.file("run");
  Output o = sh(fmt::format("DETRACE_DIAG_WRITER_HOLD_MS=1500 timeout 60 {} record -o {} -- {}/tests/fork_seam_app 400",
                            detrace(), run, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("fork_seam_app: child"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("fork_seam_app: parent"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("not recording this process: it was forked while its parent's trace writer was "
                       "inside SQLite"),
            std::string::npos)
      << o.out;
  auto by_pid = allReduceCountsByPid(run);
  ASSERT_EQ(by_pid.size(), 1u) << o.out;
  EXPECT_EQ(by_pid.begin()->second, (std::vector<int64_t>{101, 303})) << o.out;
}

TEST(RecordSeam, NcclCallsAreRecordedPerRank) {
  TempDir tmp;
  std::string run = tmp.file("run");
  std::string app = fmt::format("{}/tests/nccl_seam_app", DETRACE_BINARY_DIR);
  Output o = sh(fmt::format("{} record -o {} -- /bin/sh -c '{} 0 & {} 1; wait'", detrace(), run, app, app));
  ASSERT_EQ(o.status, 0) << o.out;
  auto r = db::Run::open(run);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(r->ranks().size(), 2u) << o.out;
  EXPECT_EQ(r->worldSize(), 4);
  std::vector<int64_t> comm_ids, split_ids, shrink_ids, grouped_ids, late_ids, scalable_ids;
  for (int32_t rank : {0, 1}) {
    SCOPED_TRACE(rank);
    auto reader = r->openRank(rank);
    ASSERT_TRUE(reader.isOk());
    auto& t = **reader;
    EXPECT_EQ(t.rank().world_size, 4);
    EXPECT_EQ(t.rank().device, rank);  // ncclCommCuDevice of the fake
    EXPECT_EQ(t.metaValue("nccl_version"), "2.28.3");
    auto colls = t.collectives();
    ASSERT_TRUE(colls.isOk());
    ASSERT_EQ(colls->size(), 19u);  // the simulated group's two calls are not among them
    const auto& c = *colls;
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].first, static_cast<int64_t>(i));  // seq order
    EXPECT_EQ(c[0].second.op, db::CollOp::kAllReduce);
    EXPECT_EQ(c[0].second.count, 1024);
    EXPECT_EQ(c[0].second.dtype, db::DType::kBF16);
    EXPECT_EQ(c[0].second.redop, db::RedOp::kSum);
    EXPECT_EQ(c[1].second.dtype, db::DType::kF32);
    EXPECT_EQ(c[1].second.redop, db::RedOp::kMax);
    EXPECT_EQ(c[2].second.op, db::CollOp::kSend);
    EXPECT_EQ(c[2].second.peer, (rank + 1) % 4);
    EXPECT_EQ(c[3].second.op, db::CollOp::kRecv);
    EXPECT_EQ(c[3].second.peer, (rank + 3) % 4);
    EXPECT_NE(c[2].second.group_id, db::kUnset);
    EXPECT_EQ(c[2].second.group_id, c[3].second.group_id);
    EXPECT_EQ(c[0].second.group_id, db::kUnset);
    EXPECT_EQ(c[4].second.op, db::CollOp::kBroadcast);
    EXPECT_EQ(c[4].second.root, 0);
    EXPECT_EQ(c[4].second.dtype, db::DType::kI32);
    // Numbers: the collectives in call order; a send or receive among its peer's sends or receives.
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(c[i].second.comm_seq, (std::array<int64_t, 5>{0, 1, 0, 0, 2}[i]));
      EXPECT_EQ(c[i].second.comm_rank, rank);
      EXPECT_EQ(c[i].second.comm_nranks, 4);
    }
    // NCCL's choices, reported through the profiler plugin (the fake picks LL up to 1024
    // elements, Simple above; 2 channels, 3 for p2p).
    EXPECT_EQ(t.str(c[0].second.algo), "Ring");
    EXPECT_EQ(t.str(c[0].second.proto), "LL");
    EXPECT_EQ(c[0].second.channels, 2);
    EXPECT_EQ(t.str(c[1].second.proto), "Simple");
    EXPECT_EQ(c[2].second.channels, 3);  // send, reported at the group end
    EXPECT_EQ(c[3].second.channels, 3);
    EXPECT_EQ(t.str(c[2].second.algo), "");  // p2p has no algorithm
    EXPECT_EQ(t.str(c[4].second.proto), "LL");
    // After a group that was only simulated (ncclGroupSimulateEnd): the next call on the world
    // communicator carries the next number, as on a rank that simulated nothing, and is in no
    // group; NCCL's choices still match it.
    EXPECT_EQ(c[5].second.op, db::CollOp::kAllReduce);
    EXPECT_EQ(c[5].second.count, 5000);
    EXPECT_EQ(c[5].second.comm_seq, 3);
    EXPECT_EQ(c[5].second.group_id, db::kUnset);
    EXPECT_EQ(t.str(c[5].second.algo), "Ring");
    EXPECT_EQ(t.str(c[5].second.proto), "Simple");
    auto stats = t.stats();
    ASSERT_TRUE(stats.isOk()) << stats.status().message();
    EXPECT_EQ((*stats)["tracer_ops_discarded"], 2);
    EXPECT_EQ(c[6].second.op, db::CollOp::kAllGather);
    EXPECT_EQ(c[6].second.comm_seq, 0);
    EXPECT_EQ(c[6].second.comm_nranks, 2);
    EXPECT_EQ(c[6].second.count, 5);
    EXPECT_NE(c[6].second.comm_id, c[0].second.comm_id);
    // The first call on a communicator the tracer followed: its id, number 0, rank and size.
    auto expectFirstCall = [](const db::Collective& call, int64_t count, int32_t comm_rank, int32_t nranks) {
      EXPECT_EQ(call.count, count);
      EXPECT_EQ(call.comm_seq, 0);
      EXPECT_EQ(call.comm_rank, comm_rank);
      EXPECT_EQ(call.comm_nranks, nranks);
      EXPECT_GE(call.comm_id, 0);
    };
    // ncclCommShrink without rank 3: ranks 0 and 1 keep their numbers in a world of 3.
    expectFirstCall(c[7].second, 9, rank, 3);
    // A split inside a group, whose handle NCCL gives at the group end: the parent's second split.
    expectFirstCall(c[8].second, 13, rank % 2, 2);
    // A non-blocking world's first all-reduce, which NCCL made on its own thread after answering
    // ncclInProgress: completed once NCCL said the communicator was ready, with the choice NCCL's
    // thread reported before the call returned (matched by buffers); the next one as usual.
    expectFirstCall(c[9].second, 23, rank, 4);
    EXPECT_EQ(t.str(c[9].second.algo), "Ring");
    EXPECT_EQ(t.str(c[9].second.proto), "LL");
    EXPECT_EQ(c[9].second.channels, 2);
    EXPECT_EQ(c[10].second.count, 25);
    EXPECT_EQ(c[10].second.comm_seq, 1);
    EXPECT_EQ(c[10].second.comm_id, c[9].second.comm_id);
    EXPECT_EQ(t.str(c[10].second.algo), "Ring");
    // Six calls answered ncclInProgress: that one, the first on each split of that world, and
    // the three calls of the group below.
    EXPECT_EQ((*stats)["nccl_calls_in_progress"], 6);
    // A split of a non-blocking communicator, whose handle NCCL gives after the call returned:
    // followed at its first call, from the slot NCCL wrote the handle to.
    expectFirstCall(c[11].second, 15, rank % 2, 2);
    // Its first call answered ncclInProgress too, and NCCL's thread reported it 20 ms later.
    EXPECT_EQ(t.str(c[11].second.algo), "Ring");
    EXPECT_EQ(t.str(c[11].second.proto), "LL");
    EXPECT_EQ((*stats)["nccl_comms_followed_late"], 2);  // this one and the group's below
    // Another, whose handle the program moved out of that slot before its first call: not
    // followed, counted once, and said so.
    for (int i : {12, 13}) {
      EXPECT_EQ(c[i].second.count, i == 12 ? 19 : 21);
      EXPECT_EQ(c[i].second.comm_id, db::kUnset);
      EXPECT_EQ(c[i].second.comm_seq, db::kUnset);
      EXPECT_EQ(c[i].second.comm_nranks, db::kUnset);
    }
    EXPECT_EQ((*stats)["nccl_comms_unfollowed"], 1);
    // A group whose end answered ncclInProgress (a third split's first use): each of its calls
    // completed once NCCL said the communicator was ready, with the choice NCCL's thread reported
    // 20 ms after the group end returned, matched by buffers (the send's and the receive's own).
    expectFirstCall(c[14].second, 27, rank % 2, 2);
    EXPECT_EQ(t.str(c[14].second.algo), "Ring");
    EXPECT_EQ(t.str(c[14].second.proto), "LL");
    EXPECT_EQ(c[14].second.channels, 2);
    EXPECT_EQ(c[15].second.op, db::CollOp::kSend);
    EXPECT_EQ(c[16].second.op, db::CollOp::kRecv);
    for (int i : {15, 16}) {
      EXPECT_EQ(c[i].second.comm_seq, 0);  // the first send to its peer, the first receive from it
      EXPECT_EQ(c[i].second.comm_id, c[14].second.comm_id);
      EXPECT_EQ(c[i].second.channels, 3);
      EXPECT_EQ(c[i].second.count, 8);
    }
    EXPECT_NE(c[14].second.group_id, db::kUnset);
    EXPECT_EQ(c[15].second.group_id, c[14].second.group_id);
    EXPECT_EQ(c[16].second.group_id, c[14].second.group_id);
    // ncclCommInitRankScalable from two roots: the world of 4 again, under an id of its own.
    expectFirstCall(c[17].second, 11, rank, 4);
    // A world made inside a group: its device is the one NCCL gives once the group made it.
    EXPECT_EQ(c[18].second.count, 17);
    EXPECT_EQ(c[18].second.comm_seq, 0);
    EXPECT_EQ(c[18].second.comm_nranks, 4);
    auto grouped_event = t.event(c[18].first);
    ASSERT_TRUE(grouped_event.isOk());
    EXPECT_EQ(grouped_event->device, rank);
    EXPECT_EQ(t.event(c[0].first)->device, rank);
    const std::set<int64_t> ids = {c[0].second.comm_id, c[6].second.comm_id, c[7].second.comm_id,
                                   c[8].second.comm_id, c[9].second.comm_id, c[11].second.comm_id,
                                   c[14].second.comm_id, c[17].second.comm_id, c[18].second.comm_id};
    EXPECT_EQ(ids.size(), 9u) << "every communicator has an id of its own";
    comm_ids.push_back(c[0].second.comm_id);
    split_ids.push_back(c[6].second.comm_id);
    shrink_ids.push_back(c[7].second.comm_id);
    grouped_ids.push_back(c[8].second.comm_id);
    late_ids.push_back(c[11].second.comm_id);
    scalable_ids.push_back(c[17].second.comm_id);
    auto ev = t.event(0);
    ASSERT_TRUE(ev.isOk());
    EXPECT_EQ(ev->kind, db::EventKind::kCollective);
    EXPECT_EQ(t.str(ev->name), "ncclAllReduce");
    EXPECT_GT(ev->cpu_ns, 0);
  }
  EXPECT_EQ(comm_ids[0], comm_ids[1]);    // same unique id on both ranks
  EXPECT_EQ(split_ids[0], split_ids[1]);  // same parent and color
  EXPECT_EQ(shrink_ids[0], shrink_ids[1]);  // same parent and excluded ranks
  EXPECT_EQ(grouped_ids[0], grouped_ids[1]);  // same parent, split count and color
  EXPECT_EQ(late_ids[0], late_ids[1]);        // the same, followed late
  EXPECT_NE(o.out.find("of a non-blocking communicator could not be followed"),
            std::string::npos)
      << o.out;
  EXPECT_EQ(scalable_ids[0], scalable_ids[1]);  // same roots
  auto m = db::readManifest(run);
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m->exit_code, 0);
}

// A collective from an atexit handler, after earlier calls: exit() has run the main thread's
// thread_local destructors by then, so per-thread state the wrappers keep must not be the
// destroyed one. With glibc's per-thread cache off, the destroyed vector's reuse crashed the
// program with SIGSEGV at its exit (seen before lasting_thread_local.h); now it exits with status
// 0, as it would untraced, and the call is in the trace (so the wrappers did hold it).
TEST(RecordSeam, ANcclCallFromAnAtexitHandlerLeavesTheProgramWhole) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Output o = sh(fmt::format("NCCL_SEAM_AT_EXIT=1 GLIBC_TUNABLES=glibc.malloc.tcache_count=0 MALLOC_PERTURB_=165 {} record -o {} -- "
                            "{}/tests/nccl_seam_app 1",
                            detrace(), run, DETRACE_BINARY_DIR));
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("nccl_seam_app: all-reduce at exit: 0"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("exited with status 0"), std::string::npos) << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk());
  ASSERT_FALSE(colls->empty());
  EXPECT_EQ(colls->back().second.count, 37) << "the all-reduce at exit was not recorded";
}

// A call that answers ncclInProgress gets NCCL's choice from NCCL's own thread, or from those
// reported before it returned; a choice NCCL reported for an earlier call left out of the
// recording (outside --window, or paused) with the same buffers is not one of them (the stand-in
// reports Simple for the left-out 4096 elements, LL for the 33).
TEST(RecordSeam, AnInProgressCallDoesNotTakeALeftOutCallsChoice) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Output o = sh(fmt::format("NCCL_SEAM_STALE_CHOICE=1 {} record -o {} --window ops:1: -- {}/tests/nccl_seam_app 1",
                            detrace(), run, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk());
  const db::Collective* deferred = nullptr;
  for (const auto& [seq, c] : *colls) {
    EXPECT_NE(c.count, 4096) << "the call outside the window was recorded";
    if (c.count == 33) deferred = &c;
  }
  ASSERT_NE(deferred, nullptr) << o.out;
  EXPECT_EQ((*reader)->str(deferred->proto), "LL");
  EXPECT_EQ(deferred->channels, 2);
}

// A communicator split from a non-blocking one has its handle written by NCCL after the split
// returned; split again before any call on it, its child must still get an id of its own (derived
// from its parent's, the same on every rank), which needs the parent followed at that split.
TEST(RecordSeam, AChildSplitBeforeItsFirstCallStillGetsAnId) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Output o = sh(fmt::format("NCCL_SEAM_SPLIT_CHILD=1 {} record -o {} -- {}/tests/nccl_seam_app 1", detrace(),
                            run, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk());
  std::set<int64_t> ids;
  const db::Collective* grandchild = nullptr;
  for (const auto& [seq, c] : *colls) {
    ids.insert(c.comm_id);
    if (c.count == 31) grandchild = &c;
  }
  ASSERT_NE(grandchild, nullptr) << o.out;
  EXPECT_NE(grandchild->comm_id, db::kUnset) << "the grandchild's call has no communicator id";
  EXPECT_EQ(grandchild->comm_seq, 0);
  EXPECT_GE(grandchild->comm_rank, 0);
  size_t with_id = 0;
  for (const auto& [seq, c] : *colls) with_id += c.comm_id == grandchild->comm_id;
  EXPECT_EQ(with_id, 1u) << "the grandchild's id is another communicator's";
  auto stats = (*reader)->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["nccl_comms_unfollowed"], 1) << "only the moved handle's (nccl_seam_app)";
}

// A thread driving several GPUs may call NCCL on the default stream with another device current
// (NCCL switches to the communicator's device itself); digests on that stream would run on the
// current device and read the other GPU's buffers. They are left out there (counted), and kept
// where the current device is the communicator's or the stream is one of the program's own.
// (The stand-in driver answers only the current device, from FAKE_CUDA_CURRENT_DEVICE; the stand-in
// NCCL puts a rank's communicators on the device of that number, rank 2's on device 2.)
TEST(RecordSeam, DefaultStreamNcclCallsOnAnotherDeviceGetNoDigests) {
  TempDir tmp;
  struct Case {
    const char* name;
    bool default_stream;
    int current_device;
    bool skipped;
  };
  for (const Case& k : {Case{"default stream, another device", true, 1, true},
                        Case{"default stream, the communicator's device", true, 2, false},
                        Case{"the program's stream, another device", false, 1, false}}) {
    SCOPED_TRACE(k.name);
    const std::string run = tmp.file(fmt::format("run{}{}", k.default_stream, k.current_device));
    Output o = sh(fmt::format(
        "NCCL_SEAM_DEFAULT_STREAM={} FAKE_CUDA_CURRENT_DEVICE={} {} record -o {} -- /bin/sh -c "
        "'LD_PRELOAD=\"$LD_PRELOAD {}/tests/libcuda_uninit_fake.so\" exec {}/tests/nccl_seam_app 2'",
        k.default_stream ? 1 : 0, k.current_device, detrace(), run, DETRACE_BINARY_DIR, DETRACE_BINARY_DIR));
    ASSERT_EQ(o.status, 0) << o.out;
    auto reader = testing::openOnlyRank(run);
    ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
    auto colls = (*reader)->collectives();
    ASSERT_TRUE(colls.isOk());
    int64_t on_device_2 = 0, elsewhere = 0;  // calls on communicators of device 2, of other devices
    for (const auto& [seq, c] : *colls) {
      auto e = (*reader)->event(seq);
      ASSERT_TRUE(e.isOk());
      if (c.count <= 0 || e->device < 0) continue;  // nothing to digest, or a device NCCL did not say
      ++(e->device == 2 ? on_device_2 : elsewhere);
    }
    ASSERT_GT(on_device_2, 0) << o.out;
    auto stats = (*reader)->stats();
    ASSERT_TRUE(stats.isOk());
    // Skipped: the default stream's calls on every communicator not of the current device; those
    // of the group only simulated (recorded, then discarded) too, on the world communicator.
    const int64_t simulated = (*stats)["tracer_ops_discarded"];
    ASSERT_EQ(simulated, 2);
    const int64_t expected = !k.default_stream         ? 0
                             : k.current_device == 2 ? elsewhere
                                                     : on_device_2 + simulated + elsewhere;
    EXPECT_EQ((*stats)["nccl_fingerprints_skipped_other_device"], expected)
        << on_device_2 << " call(s) on device 2, " << elsewhere << " elsewhere";
    EXPECT_EQ(k.skipped, expected > 0 && k.current_device != 2);
  }
}

// nccl_seam_app recorded by `command` (a `detrace record -o run ...` line): how many collectives
// of `count` elements the trace holds, and its stats.
struct SeamTrace {
  int calls_of_count = 0;
  std::map<std::string, int64_t> stats;
};
void recordSeamApp(const std::string& command, const std::string& run, int64_t count, SeamTrace& out) {
  Output o = sh(command);
  ASSERT_EQ(o.status, 0) << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk());
  for (const auto& [seq, c] : *colls) out.calls_of_count += c.count == count;
  auto stats = (*reader)->stats();
  ASSERT_TRUE(stats.isOk());
  out.stats = *stats;
}

// As in DefaultStreamNcclCallsOnAnotherDeviceGetNoDigests, at a group's end: a default-stream
// call made with its communicator's device current, in a group ended with another device current,
// gets no output digests (they would run at the end, in the current context); with the device
// unchanged, it keeps them.
TEST(RecordSeam, AGroupEndedOnAnotherDeviceTakesNoDefaultStreamOutputDigests) {
  TempDir tmp;
  for (bool switched : {true, false}) {
    SCOPED_TRACE(switched ? "ended on device 0" : "not switched");
    const std::string run = tmp.file(switched ? "switched" : "kept");
    SeamTrace t;
    ASSERT_NO_FATAL_FAILURE(recordSeamApp(
        fmt::format("NCCL_SEAM_GROUP_SWITCH={} FAKE_CUDA_CURRENT_DEVICE=2 {} record -o {} -- /bin/sh -c "
                    "'LD_PRELOAD=\"$LD_PRELOAD {}/tests/libcuda_uninit_fake.so\" exec {}/tests/nccl_seam_app 2'",
                    switched ? 1 : 0, detrace(), run, DETRACE_BINARY_DIR, DETRACE_BINARY_DIR),
        run, 43, t));
    EXPECT_EQ(t.calls_of_count, switched ? 1 : 0);
    EXPECT_EQ(t.stats["nccl_fingerprints_skipped_other_device"], switched ? 1 : 0);
  }
}

// NCCL reports its algorithm, protocol and channels only through the profiler plugin it loads.
// Where it loaded none (an NCCL before 2.28 has no API v5; here the user's NCCL_PROFILER_PLUGIN,
// which wins over detrace's, names a library that does not exist), the trace says how often it was
// initialized, 0, and `detrace info` warns that the collectives carry no choices; with the plugin
// loaded there is no such warning.
TEST(RecordSeam, InfoWarnsWhenNcclLoadedNoProfilerPlugin) {
  TempDir tmp;
  const std::string app = fmt::format("{}/tests/nccl_seam_app 0", DETRACE_BINARY_DIR);
  for (bool plugin : {true, false}) {
    SCOPED_TRACE(plugin ? "with the plugin" : "without");
    const std::string run = tmp.file(plugin ? "with" : "without");
    Output o = sh(fmt::format("{}{} record -o {} -- {}", plugin ? "" : "NCCL_PROFILER_PLUGIN=/nonexistent/libnccl-profiler.so ", detrace(), run, app));
    ASSERT_EQ(o.status, 0) << o.out;
    auto reader = testing::openOnlyRank(run);
    ASSERT_TRUE(reader.isOk()) << reader.status().message();
    auto colls = (*reader)->collectives();
    ASSERT_TRUE(colls.isOk());
    ASSERT_FALSE(colls->empty());
    auto stats = (*reader)->stats();
    ASSERT_TRUE(stats.isOk());
    ASSERT_EQ(stats->count("nccl_profiler_inits"), 1u);
    if (plugin) {
      EXPECT_GT((*stats)["nccl_profiler_inits"], 0);
    } else {
      EXPECT_EQ((*stats)["nccl_profiler_inits"], 0);
    }
    int with_choice = 0;
    for (const auto& [seq, c] : *colls) with_choice += !(*reader)->str(c.proto).empty();
    EXPECT_EQ(with_choice > 0, plugin) << with_choice << " of " << colls->size();
    Output info = sh(fmt::format("{} info {}", detrace(), run));
    ASSERT_EQ(info.status, 0) << info.out;
    const bool warned = info.out.find("never loaded detrace's profiler plugin") != std::string::npos;
    EXPECT_EQ(warned, !plugin) << info.out;
    if (!plugin) {
      EXPECT_NE(info.out.find(fmt::format("its {} collective(s) carry no algorithm", colls->size())),
                std::string::npos) << info.out;
    }
  }
}

// Ranks that make different numbers of sends and receives on a communicator (the stages of a
// pipeline: the first only sends, the others receive and send) still number its collectives alike,
// and a send's number is the number of its receive on the peer (the n-th message between them).
TEST(RecordSeam, PipelineStagesNumberTheirCollectivesAlike) {
  TempDir tmp;
  std::vector<int64_t> reduce_seq;
  std::map<std::pair<int, int>, std::vector<int64_t>> sends, recvs;  // (from, to) -> numbers
  for (int rank = 0; rank < 3; ++rank) {  // (the app cannot run as rank 3: it shrinks it away)
    SCOPED_TRACE(rank);
    const std::string run = tmp.file(fmt::format("stage{}", rank));
    Output o = sh(fmt::format("NCCL_SEAM_PIPELINE=1 {} record -o {} -- {}/tests/nccl_seam_app {}", detrace(), run,
                              DETRACE_BINARY_DIR, rank));
    ASSERT_EQ(o.status, 0) << o.out;
    auto reader = testing::openOnlyRank(run);
    ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
    auto colls = (*reader)->collectives();
    ASSERT_TRUE(colls.isOk());
    for (const auto& [seq, c] : *colls) {
      if (c.comm_nranks != 4 || c.comm_id != colls->front().second.comm_id) continue;  // the world
      if (c.op == db::CollOp::kAllReduce && c.count == 41) reduce_seq.push_back(c.comm_seq);
      if (c.op == db::CollOp::kSend && c.count == 4) sends[{rank, c.peer}].push_back(c.comm_seq);
      if (c.op == db::CollOp::kRecv && c.count == 4) recvs[{c.peer, rank}].push_back(c.comm_seq);
    }
  }
  ASSERT_EQ(reduce_seq.size(), 3u);
  for (int64_t s : reduce_seq) EXPECT_EQ(s, reduce_seq.front()) << "the all-reduce's number differs between ranks";
  ASSERT_EQ(sends.size(), 3u);  // 0 -> 1, 1 -> 2, 2 -> 3
  for (const auto& [edge, numbers] : sends) {
    SCOPED_TRACE(fmt::format("{} -> {}", edge.first, edge.second));
    // After the world's first exchange (each rank sent one message to the next and received one
    // from the one before; the simulated group's send gave its number back).
    EXPECT_EQ(numbers, (std::vector<int64_t>{1, 2, 3}));
    if (edge.second < 3) {
      EXPECT_EQ(recvs[edge], numbers) << "the receiver numbers the messages as the sender";
    }
  }
}

// A communicator revoked (NCCL 2.28) while a call on it is still being made by NCCL's thread
// (it answered ncclInProgress): the call is recorded, completed at the revoke without its
// outputs' fingerprints (the stopped call's output is not its result), and the trace and
// `detrace info` say that the communicator was revoked. Without the revoke, nothing of it.
TEST(RecordSeam, ARevokedCommunicatorsCallInFlightIsCompletedAtTheRevoke) {
  TempDir tmp;
  for (bool revoke : {true, false}) {
    SCOPED_TRACE(revoke ? "revoked" : "not revoked");
    const std::string run = tmp.file(revoke ? "revoked" : "kept");
    SeamTrace t;
    ASSERT_NO_FATAL_FAILURE(recordSeamApp(fmt::format("NCCL_SEAM_REVOKE={} {} record -o {} -- {}/tests/nccl_seam_app 1",
                                                      revoke ? 1 : 0, detrace(), run, DETRACE_BINARY_DIR),
                                          run, 29, t));
    EXPECT_EQ(t.calls_of_count, revoke ? 1 : 0);
    EXPECT_EQ(t.stats["nccl_comms_revoked"], revoke ? 1 : 0);
    EXPECT_EQ(t.stats["nccl_calls_revoked"], revoke ? 1 : 0);
    Output info = sh(fmt::format("{} info {}", detrace(), run));
    ASSERT_EQ(info.status, 0) << info.out;
    EXPECT_EQ(info.out.find("revoked 1 NCCL communicator(s)") != std::string::npos, revoke) << info.out;
  }
}

// The real interposer records cuBLAS and cuBLASLt GEMMs of a program linked against a fake
// cuBLAS (tests/tracer/cublas_seam_app.cc lists the calls): shapes, leading dimensions, batches,
// dtypes, compute types and the algorithm, the caller's or the one cuBLASLt's heuristic picks
// (asked once per distinct problem).
TEST(RecordSeam, GemmCallsAreRecordedWithShapesAndAlgorithms) {
  TempDir tmp;
  std::string run = tmp.file("run");
  std::string app = fmt::format("{}/tests/cublas_seam_app", DETRACE_BINARY_DIR);
  Output o = sh(fmt::format("{} record -o {} -- {}", detrace(), run, app));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("heuristic calls 2"), std::string::npos)
      << "the heuristic is asked once per distinct problem:\n"
      << o.out;
  EXPECT_NE(o.out.find(fmt::format("refused call returned {}", 7)), std::string::npos)
      << "a refused call's status (CUBLAS_STATUS_INVALID_VALUE) comes back unchanged:\n"
      << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto& t = **reader;
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  ASSERT_EQ(gemms->size(), 9u) << o.out;
  std::vector<db::Gemm> g;
  std::vector<db::Event> ev;
  for (const auto& [seq, gemm] : *gemms) {
    g.push_back(gemm);
    auto e = t.event(seq);
    ASSERT_TRUE(e.isOk());
    ev.push_back(*e);
  }
  // --capture-ops accepts each entry point a GEMM is recorded under, and selects the GEMM by it.
  for (const db::Gemm& x : g) {
    auto by_name = tracer::parseOpFilter(t.str(x.api));
    ASSERT_TRUE(by_name.isOk()) << by_name.status().message();
    EXPECT_TRUE(by_name->matches(true, t.str(x.api))) << t.str(x.api);
  }
  auto shape = [](const db::Gemm& x) {
    return std::array<int64_t, 7>{x.m, x.n, x.k, x.lda, x.ldb, x.ldc, x.ldd};
  };
  // 1. cublasGemmEx, A^T B, bf16.
  EXPECT_EQ(t.str(g[0].api), "cublasGemmEx");
  EXPECT_EQ(t.str(ev[0].name), "cublasGemmEx");
  EXPECT_EQ(ev[0].kind, db::EventKind::kGemm);
  EXPECT_EQ((std::array{g[0].trans_a, g[0].trans_b}), (std::array{1, 0}));
  EXPECT_EQ(shape(g[0]), (std::array<int64_t, 7>{64, 1, 512, 512, 512, 64, 64}));
  EXPECT_EQ(g[0].a_dtype, db::DType::kBF16);
  EXPECT_EQ(g[0].d_dtype, db::DType::kBF16);
  EXPECT_EQ(t.str(g[0].compute_type), "CUBLAS_COMPUTE_32F");
  EXPECT_EQ(g[0].algo_id, -1);     // CUBLAS_GEMM_DEFAULT
  EXPECT_EQ(g[0].algo_source, 0);  // classic cuBLAS does not say which kernel it runs
  EXPECT_EQ(g[0].batch_count, 1);
  EXPECT_NE(g[0].a_addr, 0);
  EXPECT_NE(g[0].a_addr, g[0].b_addr);
  EXPECT_EQ(g[0].c_addr, g[0].d_addr);
  // 2. cublasSgemm, A B^T.
  EXPECT_EQ(t.str(g[1].api), "cublasSgemm");
  EXPECT_EQ((std::array{g[1].trans_a, g[1].trans_b}), (std::array{0, 1}));
  EXPECT_EQ(shape(g[1]), (std::array<int64_t, 7>{3, 5, 7, 3, 5, 3, 3}));
  EXPECT_EQ(g[1].b_dtype, db::DType::kF32);
  // 3. cublasGemmStridedBatchedEx, f16, batch 4.
  EXPECT_EQ(t.str(g[2].api), "cublasGemmStridedBatchedEx");
  EXPECT_EQ(shape(g[2]), (std::array<int64_t, 7>{16, 8, 32, 16, 32, 16, 16}));
  EXPECT_EQ(g[2].batch_count, 4);
  EXPECT_EQ((std::array{g[2].stride_a, g[2].stride_b, g[2].stride_c, g[2].stride_d}),
            (std::array<int64_t, 4>{512, 256, 128, 128}));
  EXPECT_EQ(g[2].c_dtype, db::DType::kF16);
  EXPECT_EQ(g[2].algo_id, 99);  // CUBLAS_GEMM_DEFAULT_TENSOR_OP
  // 4. cublasSgemmStridedBatched, A^T B^T, batch 2.
  EXPECT_EQ(t.str(g[3].api), "cublasSgemmStridedBatched");
  EXPECT_EQ((std::array{g[3].trans_a, g[3].trans_b}), (std::array{1, 1}));
  EXPECT_EQ(shape(g[3]), (std::array<int64_t, 7>{2, 3, 4, 4, 3, 2, 2}));
  EXPECT_EQ(g[3].batch_count, 2);
  EXPECT_EQ((std::array{g[3].stride_a, g[3].stride_b, g[3].stride_c}),
            (std::array<int64_t, 3>{8, 12, 6}));
  // The refused call is recorded as made (its status is the program's to see).
  EXPECT_EQ(t.str(g[4].api), "cublasSgemm");
  EXPECT_EQ(g[4].m, -1);
  g.erase(g.begin() + 4);
  ev.erase(ev.begin() + 4);
  // 5. cublasLtMatmul with the caller's algorithm, read back from its configuration.
  EXPECT_EQ(t.str(g[4].api), "cublasLtMatmul");
  EXPECT_EQ((std::array{g[4].trans_a, g[4].trans_b}), (std::array{1, 0}));
  EXPECT_EQ(shape(g[4]), (std::array<int64_t, 7>{128, 4, 256, 256, 256, 128, 128}));
  EXPECT_EQ(g[4].a_dtype, db::DType::kBF16);
  EXPECT_EQ(t.str(g[4].compute_type), "CUBLAS_COMPUTE_32F");
  EXPECT_EQ(g[4].algo_source, 1);
  EXPECT_EQ((std::array{g[4].algo_id, g[4].tile, g[4].split_k, g[4].reduction_scheme, g[4].swizzle,
                        g[4].custom_option, g[4].stages}),
            (std::array<int32_t, 7>{21, 18, 3, 1, 1, 2, 11}));
  // 6.-8. No algorithm: the heuristic's answer (the fake's: id 100 + m mod 50, tile 7, split-K 1).
  for (size_t i : {5u, 6u}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(shape(g[i]), shape(g[4]));
    EXPECT_EQ(g[i].algo_source, 2);
    EXPECT_EQ((std::array{g[i].algo_id, g[i].tile, g[i].split_k}),
              (std::array<int32_t, 3>{128, 7, 1}));
  }
  EXPECT_EQ(shape(g[7]), (std::array<int64_t, 7>{96, 4, 256, 256, 256, 128, 128}));
  EXPECT_EQ(g[7].batch_count, 2);
  EXPECT_EQ((std::array{g[7].stride_a, g[7].stride_b, g[7].stride_d}),
            (std::array<int64_t, 3>{24576, 1024, 384}));
  EXPECT_EQ(g[7].algo_source, 2);
  EXPECT_EQ(g[7].algo_id, 146);
  // No epilogue anywhere: classic cuBLAS has none, the cuBLASLt calls leave it at its default.
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(g[i].epilogue, 1) << i;
  // Calls 1-4 named one stream, 5-8 another.
  for (size_t i = 1; i < 8; ++i) EXPECT_EQ(ev[i].stream, ev[i < 4 ? 0 : 4].stream) << i;
  EXPECT_NE(ev[0].stream, ev[4].stream);
  for (size_t i = 1; i < 8; ++i) EXPECT_LE(ev[i - 1].cpu_ns, ev[i].cpu_ns) << "API order";
}

// What the heuristic answers depends on more than the shape (a layout's order, a broadcast batch):
// each such problem is asked about once and recorded with its own answer (the fake answers
// 114, +500 for a row-major A, +300 for a batched A of stride 0); a classic call's compute type
// is a cublasComputeType_t also where the caller passed a cudaDataType, and follows the handle's
// math mode (TF32) for single precision (tests/tracer/cublas_layouts_app.cc lists the calls).
TEST(RecordSeam, HeuristicAnswersFollowLayoutOrderAndStridesAndComputeTypesTheMathMode) {
  TempDir tmp;
  std::string run = tmp.file("run");
  Output o = sh(fmt::format("{} record -o {} -- {}/tests/cublas_layouts_app", detrace(), run, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("heuristic calls 4"), std::string::npos) << "four problems, each asked once:\n" << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto& t = **reader;
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  std::vector<db::Gemm> g;
  for (const auto& [seq, gemm] : *gemms) g.push_back(gemm);
  ASSERT_EQ(g.size(), 6u) << o.out;
  std::vector<int32_t> algos;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(g[i].algo_source, 2) << i;
    algos.push_back(g[i].algo_id);
  }
  EXPECT_EQ(algos, (std::vector<int32_t>{114, 614, 414, 114}))
      << "column-major, row-major, broadcast A, strided A";
  EXPECT_EQ(t.str(g[4].api), "cublasGemmEx");
  EXPECT_EQ(t.str(g[4].compute_type), "CUBLAS_COMPUTE_32F") << "CUDA_R_32F passed as the compute type";
  EXPECT_EQ(t.str(g[5].api), "cublasSgemm");
  EXPECT_EQ(t.str(g[5].compute_type), "CUBLAS_COMPUTE_32F_FAST_TF32") << "the handle's TF32 math mode";
}

// A program recorded with DETRACE_DIAG_TIMING=1: its output, its first rank's stats and
// collectives; nullopt (with a failure reported) if recording or reading failed.
struct DiagRun {
  std::string out;
  std::map<std::string, int64_t> stats;
  size_t collectives = 0;
  int64_t stat(const std::string& key) const {
    auto it = stats.find(key);
    return it == stats.end() ? int64_t{-1} : it->second;
  }
};
std::optional<DiagRun> recordDiag(TempDir& tmp, const std::string& command) {
  std::string run = tmp.file("run");
  Output o =
      sh(fmt::format("DETRACE_DIAG_TIMING=1 {} record -o {} -- {}", detrace(), run, command));
  EXPECT_EQ(o.status, 0) << o.out;
  auto r = db::Run::open(run);
  EXPECT_TRUE(r.isOk()) << (r.isOk() ? "" : r.status().message()) << o.out;
  if (o.status != 0 || !r.isOk() || r->ranks().empty()) return std::nullopt;
  auto reader = r->openRank(r->ranks().front().rank);
  EXPECT_TRUE(reader.isOk());
  if (!reader.isOk()) return std::nullopt;
  auto stats = (*reader)->stats();
  auto colls = (*reader)->collectives();
  EXPECT_TRUE(stats.isOk() && colls.isOk());
  if (!stats.isOk() || !colls.isOk()) return std::nullopt;
  return DiagRun{o.out, *stats, colls->size()};
}

// Number settings in the program's environment that are no number, or past their range, are
// named in a log line and replaced; the program is recorded all the same (was: taken silently, a
// huge reorder timeout overflowing into a negative one).
TEST(RecordSeam, BadNumberSettingsAreNamedAndReplaced) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Output o = sh(fmt::format(
      "DETRACE_REORDER_TIMEOUT_MS=9223372036854775807 DETRACE_EXIT_TIMEOUT_S=abc DETRACE_RECORDS_HOLD_MS=-1 "
      "{} record -o {} -- {}/tests/cublas_seam_app",
      detrace(), run, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  for (const char* said : {"ignoring a setting: DETRACE_REORDER_TIMEOUT_MS=9223372036854775807 is outside 1 to "
                           "3600000; using 3600000",
                           "ignoring a setting: DETRACE_EXIT_TIMEOUT_S=abc is not a whole number (1 to 604800); using 60",
                           "ignoring a setting: DETRACE_RECORDS_HOLD_MS=-1 is not a positive number (1 to 60000); using 500"}) {
    EXPECT_NE(o.out.find(said), std::string::npos) << said << "\n" << o.out;
  }
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto gemms = (*reader)->gemms();
  ASSERT_TRUE(gemms.isOk());
  EXPECT_EQ(gemms->size(), 9u);
}

// A program may have the CUDA driver loaded without ever initializing it (no context): the GEMM
// wrappers then ask nothing of the stream handles they are given. The H200 machine's driver,
// asked whether the fake app's made-up stream 0x1234 was capturing, crashed the app (SIGSEGV);
// the preloaded fake driver aborts where it did. The fake must count as a driver (the tracer
// does not log that it found none), and fingerprints must be on although no CUPTI runs here
// (DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI=1), else the test would prove nothing.
TEST(RecordSeam, GemmsWithTheDriverLoadedButNoContextAskNothingOfTheirStreams) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  Output o = sh(fmt::format(
      "DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI=1 {} record -o {} -- /bin/sh -c "
      "'LD_PRELOAD=\"$LD_PRELOAD {}/tests/libcuda_uninit_fake.so\" exec {}/tests/cublas_seam_app'",
      detrace(), run, DETRACE_BINARY_DIR, DETRACE_BINARY_DIR));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(o.out.find("fake_cuda_uninit"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("entry points were not found"), std::string::npos)
      << "the fake driver was not taken for one:\n"
      << o.out;
  EXPECT_EQ(o.out.find("fingerprints are off"), std::string::npos) << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto gemms = (*reader)->gemms();
  ASSERT_TRUE(gemms.isOk());
  EXPECT_EQ(gemms->size(), 9u) << o.out;
  // The refused call (m = -1) gets no digests after it: its arguments may name memory it lacks.
  auto stats = (*reader)->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["fingerprints_skipped_failed_call"], 1) << o.out;
}

// With DETRACE_DIAG_TIMING=1, gemm_wrapper times each outermost interposed GEMM call and gemm_call
// the forwarded call inside it: one of each per GEMM, the forwarded call inside the whole one,
// and the library op's recording inside the whole call too; gemm_gap the time from one GEMM call's
// return to the next one's entry (8 gaps between 9 calls). All were made while capturing: none
// lands on the paused sites.
TEST(RecordSeam, DiagTimingTimesAGemmsWholeCallAroundItsForwardedCall) {
  TempDir tmp;
  auto d = recordDiag(tmp, fmt::format("{}/tests/cublas_seam_app", DETRACE_BINARY_DIR));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->stat("diag_gemm_wrapper_calls"), 9) << d->out;  // the refused call too
  EXPECT_EQ(d->stat("diag_gemm_call_calls"), 9);
  EXPECT_EQ(d->stat("diag_library_op_calls"), 9);
  EXPECT_GT(d->stat("diag_gemm_call_ns"), 0);
  EXPECT_GE(d->stat("diag_gemm_wrapper_ns"),
            d->stat("diag_gemm_call_ns") + d->stat("diag_library_op_ns"));
  EXPECT_EQ(d->stat("diag_gemm_gap_calls"), 8);
  EXPECT_GT(d->stat("diag_gemm_gap_ns"), 0);
  for (const char* paused : {"wrapper", "call", "gap"})
    EXPECT_EQ(d->stat(fmt::format("diag_gemm_{}_paused_calls", paused)), -1) << paused;
}

// Each trace says which --row-digests it was recorded with (diff refuses to compare runs that
// differ), "tokens" by default.
TEST(RecordSeam, TheTraceSaysWhichRowDigestsItWasRecordedWith) {
  TempDir tmp;
  for (const char* rows : {"", "tokens", "all"}) {
    const std::string run = tmp.file(fmt::format("run-{}", rows));
    Output o = sh(fmt::format("{} record -o {} {}{} -- {}/tests/cublas_seam_app", detrace(), run,
                              *rows ? "--row-digests " : "", rows, DETRACE_BINARY_DIR));
    ASSERT_EQ(o.status, 0) << o.out;
    auto r = db::Run::open(run);
    ASSERT_TRUE(r.isOk() && !r->ranks().empty()) << o.out;
    auto reader = r->openRank(r->ranks().front().rank);
    ASSERT_TRUE(reader.isOk());
    const auto& meta = (*reader)->meta();
    ASSERT_TRUE(meta.count("row_digests")) << rows;
    EXPECT_EQ(meta.at("row_digests"), *rows ? rows : "tokens");
    ASSERT_TRUE(meta.count("graph_weights_every")) << rows;
    EXPECT_EQ(meta.at("graph_weights_every"), "1");
  }
}

// DETRACE_DIAG_TIMING=1 times detrace's own code per site on the program's threads: each site
// writes its calls, total, longest call and calls of 100 us or more, consistently with each other,
// and a library op's fill and publication are counted once per op and inside the op's own time.
TEST(RecordSeam, DiagTimingWritesEachSitesTotalLongestAndStalls) {
  TempDir tmp;
  auto d = recordDiag(tmp, fmt::format("{}/tests/nccl_seam_app 0", DETRACE_BINARY_DIR));
  ASSERT_TRUE(d.has_value());
  auto stat = [&](const std::string& key) { return d->stat(key); };
  // Every call timed, the simulated group's too (recorded, then discarded: nccl_seam_app).
  EXPECT_EQ(stat("diag_library_op_calls"), static_cast<int64_t>(d->collectives) + stat("tracer_ops_discarded"));
  EXPECT_EQ(stat("tracer_ops_discarded"), 2);
  EXPECT_EQ(stat("diag_op_fill_calls"), stat("diag_library_op_calls"));
  EXPECT_EQ(stat("diag_op_publish_calls"), stat("diag_library_op_calls"));
  EXPECT_LE(stat("diag_op_fill_ns") + stat("diag_op_publish_ns"), stat("diag_library_op_ns"));
  int sites = 0;
  for (const auto& [key, calls] : d->stats) {
    const bool calls_key =
        key.rfind("diag_", 0) == 0 && key.size() > 11 && key.substr(key.size() - 6) == "_calls";
    if (!calls_key) continue;
    const std::string site = key.substr(0, key.size() - 6);
    SCOPED_TRACE(site);
    ++sites;
    const int64_t total = stat(site + "_ns");
    const int64_t longest = stat(site + "_max_ns");
    const int64_t slow = stat(site + "_slow");
    ASSERT_GT(calls, 0);
    ASSERT_GE(total, 0);
    ASSERT_GE(longest, 0) << "no longest call written";
    ASSERT_GE(slow, 0) << "no count of slow calls written";
    EXPECT_LE(longest, total);
    EXPECT_GE(longest * calls, total) << "the longest call is shorter than the mean";
    EXPECT_LE(slow, calls);
    EXPECT_LE(slow * 100'000, total) << "more slow calls than the total time allows";
  }
  EXPECT_GE(sites, 2) << d->out;
}

// A program's own collectives, declared through detrace/annotate.h, are recorded like NCCL's:
// one communicator id on every rank, numbered per group, defining the rank and world size.
// Invalid descriptions and unknown tokens are ignored, and without detrace nothing happens.
TEST(RecordSeam, AnnotatedCollectivesAreRecordedPerRank) {
  TempDir tmp;
  std::string run = tmp.file("run");
  std::string app = fmt::format("{}/tests/annotate_seam_app", DETRACE_BINARY_DIR);
  Output plain = sh(app + " 1");
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_NE(plain.out.find("tokens 0 0 0 0"), std::string::npos) << plain.out;
  Output o = sh(fmt::format("{} record -o {} --capture meta -- /bin/sh -c '{} 0 & {} 2; wait'",
                            detrace(), run, app, app));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("rank 2 tokens recorded recorded recorded 0"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("a rank outside [0, nranks)"), std::string::npos) << o.out;
  auto r = db::Run::open(run);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(r->ranks().size(), 2u) << o.out;
  EXPECT_EQ(r->worldSize(), 3);
  std::vector<int64_t> ids;
  for (int32_t rank : {0, 2}) {
    SCOPED_TRACE(rank);
    auto reader = r->openRank(rank);
    ASSERT_TRUE(reader.isOk()) << reader.status().message();
    auto& t = **reader;
    EXPECT_EQ(t.rank().world_size, 3);
    auto colls = t.collectives();
    ASSERT_TRUE(colls.isOk());
    ASSERT_EQ(colls->size(), 3u);
    const auto& c = *colls;
    const char* names[] = {"oneshot_allreduce", "twoshot_reduce_scatter", "oneshot_allreduce"};
    for (size_t i = 0; i < c.size(); ++i) {
      auto ev = t.event(c[i].first);
      ASSERT_TRUE(ev.isOk());
      EXPECT_EQ(ev->kind, db::EventKind::kCollective);
      EXPECT_EQ(t.str(ev->name), names[i]);
      EXPECT_EQ(c[i].second.comm_seq, static_cast<int64_t>(i));
      EXPECT_EQ(c[i].second.comm_rank, rank);
      EXPECT_EQ(c[i].second.comm_nranks, 3);
      EXPECT_EQ(c[i].second.comm_id, c[0].second.comm_id);
      EXPECT_EQ(c[i].second.redop, db::RedOp::kSum);
    }
    EXPECT_EQ(c[0].second.op, db::CollOp::kAllReduce);
    EXPECT_EQ(c[0].second.dtype, db::DType::kBF16);
    EXPECT_EQ(c[0].second.count, 512);
    EXPECT_EQ(c[1].second.op, db::CollOp::kReduceScatter);
    EXPECT_EQ(c[1].second.dtype, db::DType::kF32);
    EXPECT_EQ(c[1].second.count, 100);
    EXPECT_EQ(c[0].second.recv_addr - c[0].second.send_addr, 2048);
    EXPECT_GE(c[0].second.comm_id, 0);
    ids.push_back(c[0].second.comm_id);
  }
  EXPECT_EQ(ids[0], ids[1]);
}

}  // namespace
}  // namespace detrace

namespace detrace {
namespace {

// The interposer's static thread-local storage stays small: glibc takes it from the stack of every
// thread the program makes (the library is preloaded), so a large one would stop a thread made
// with a small stack from starting. Per-thread tables live on the heap instead (name_cache.cc,
// nccl_wrappers.cc's ChoiceIndex).
TEST(TracerLibrary, KeepsItsStaticThreadLocalStorageSmall) {
  const std::string lib = fmt::format("{}/tracer/libdetrace_tracer.so", DETRACE_BINARY_DIR);
  Output o = sh(fmt::format("readelf -lW {} | awk '$1 == \"TLS\" {{ print $6 }}'", lib));
  ASSERT_EQ(o.status, 0) << o.out;
  ASSERT_FALSE(o.out.empty()) << "no TLS segment found by readelf";
  const uint64_t bytes = std::stoull(o.out, nullptr, 16);
  EXPECT_GT(bytes, 0u);
  EXPECT_LE(bytes, 4096u) << "static TLS of " << bytes << " bytes per thread";
}

// The interposer exports only what it means to: the CUDA injection entry point, the NCCL and
// cuBLAS functions it wraps (and dlsym, which hands those wrappers to lookups through NCCL's
// handle), NCCL's profiler plugin table and the annotation API. Anything else could clash with
// the host program's own symbols.
TEST(TracerLibrary, ExportsOnlyItsEntryPoints) {
  std::string lib = fmt::format("{}/tracer/libdetrace_tracer.so", DETRACE_BINARY_DIR);
  std::FILE* p = popen(fmt::format("nm -D --defined-only {} 2>&1", lib).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::array<char, 1024> line;
  int symbols = 0;
  bool injection = false, plugin = false;
  while (std::fgets(line.data(), line.size(), p) != nullptr) {
    std::string l(line.data());
    if (!l.empty() && l.back() == '\n') l.pop_back();
    std::string name = l.substr(l.rfind(' ') + 1);
    ++symbols;
    injection |= name == "InitializeInjection";
    plugin |= name == "ncclProfiler_v5";
    bool allowed = name == "InitializeInjection" || name == "dlsym" || name.rfind("nccl", 0) == 0 ||
                   name.rfind("cublas", 0) == 0 || name == "detrace_collective_begin" ||
                   name == "detrace_collective_end";
    EXPECT_TRUE(allowed) << "unexpected exported symbol: " << l;
  }
  EXPECT_EQ(pclose(p), 0) << "nm failed on " << lib;
  EXPECT_GT(symbols, 10);
  EXPECT_TRUE(injection);
  EXPECT_TRUE(plugin);
}

// Lines of a command's output.
std::vector<std::string> outputLines(const std::string& cmd) {
  std::vector<std::string> lines;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return lines;
  std::array<char, 1024> line;
  while (std::fgets(line.data(), line.size(), p) != nullptr) {
    std::string l(line.data());
    if (!l.empty() && l.back() == '\n') l.pop_back();
    lines.push_back(l);
  }
  pclose(p);
  return lines;
}

// SQLite, zstd and fmt are inside the library, hidden: it needs only the C runtime, so it never
// meets (or lends itself to) the host's own copies, and none of their symbols is exported or
// left for the host to provide (zstd's weak tracing hooks included).
TEST(TracerLibrary, NeedsOnlyTheCRuntime) {
  std::string lib = fmt::format("{}/tracer/libdetrace_tracer.so", DETRACE_BINARY_DIR);
  std::vector<std::string> needed;
  for (const std::string& l : outputLines("readelf -d " + lib)) {
    if (l.find("(NEEDED)") == std::string::npos) continue;
    std::string name = l.substr(l.find('[') + 1);
    name = name.substr(0, name.find(']'));
    needed.push_back(name);
    bool allowed = name.rfind("libc.so", 0) == 0 || name.rfind("libm.so", 0) == 0 ||
                   name.rfind("ld-linux", 0) == 0 || name.rfind("libdl.so", 0) == 0 ||
                   name.rfind("libpthread.so", 0) == 0;
    EXPECT_TRUE(allowed) << "unexpected NEEDED library: " << name;
  }
  EXPECT_FALSE(needed.empty()) << "readelf found no NEEDED entries in " << lib;
  for (const std::string& l : outputLines("nm -D --undefined-only " + lib)) {
    std::string name = l.substr(l.rfind(' ') + 1);
    bool runtime = name.find("@GLIBC") != std::string::npos || name.rfind("_ITM_", 0) == 0 ||
                   name.rfind("_ZGTt", 0) == 0 || name == "__gmon_start__" ||
                   name == "__cxa_pure_virtual";
    EXPECT_TRUE(runtime) << "left for the host to define: " << l;
  }
}

}  // namespace
}  // namespace detrace
