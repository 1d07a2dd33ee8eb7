// End to end through the `detrace` binary: info, export and schema on real trace files written by
// TraceWriter, and clear errors (exit status 2) for bad input.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "../db/test_util.h"
#include "detrace/db/run.h"
#include "detrace/db/schema.h"
#include "detrace/db/writer.h"
#include "common/shell.h"

namespace detrace {
namespace {

using testing::Rng;
using testing::TempDir;

using Output = testing::ShellOutput;

// Runs detrace with `args`; captures stdout and stderr together.
Output detrace(const std::string& args) {
  return testing::runShell(fmt::format("{}/replay/detrace {}", DETRACE_BINARY_DIR, args));
}

struct MadeRun {
  int64_t kernels = 0, gemms = 0, collectives = 0;
};

// A 2-rank run with random counts of each kind; returns what was written per rank 0.
MadeRun makeRun(const TempDir& dir, Rng& rng) {
  MadeRun made;
  for (int32_t rank = 0; rank < 2; ++rank) {
    auto w = db::TraceWriter::create(dir.file(fmt::format("proc-{}.dtrace", 10 + rank)));
    EXPECT_TRUE(w.isOk());
    (*w)->setRank({rank, 2, rank, rank, 10 + rank, "h", "GPU", ""});
    int64_t k = (*w)->intern("my_kernel\"with\\quotes");
    int64_t s = (*w)->stream(0xabc, rank);
    int64_t n = rng.range(50, 200);
    for (int64_t i = 0; i < n; ++i) {
      db::Event e = testing::randomKernel(rng, k, s);
      e.cpu_ns = 1'000'000 + i * 1000;
      e.gpu_start_ns = e.cpu_ns + 10;
      e.gpu_end_ns = e.gpu_start_ns + 100;
      if (i % 7 == 0) {
        e.kind = db::EventKind::kGemm;
        e.has_launch = false;
        e.launch = {};
        db::Gemm g;
        g.m = 64; g.n = 128; g.k = 256 + i;
        (void)(*w)->appendGemm(e, g);
        if (rank == 0) ++made.gemms;
      } else if (i % 11 == 0) {
        e.kind = db::EventKind::kCollective;
        e.has_launch = false;
        e.launch = {};
        db::Collective c;
        c.op = db::CollOp::kAllReduce;
        c.count = i;
        c.proto = (*w)->intern("LL128");
        (void)(*w)->appendCollective(e, c);
        if (rank == 0) ++made.collectives;
      } else {
        (void)(*w)->append(e);
        if (rank == 0) ++made.kernels;
      }
    }
    EXPECT_TRUE((*w)->close().isOk());
  }
  db::RunManifest m;
  m.command = {"python", "serve.py"};
  m.exit_code = 0;
  EXPECT_TRUE(db::writeManifest(dir.path().string(), m).isOk());
  return made;
}

// A trace whose event numbers skip one (a row deleted from the middle) is damage that `info`
// names, as `diff` does, instead of counting the missing number as an event (exit 0).
TEST(Cli, InfoNamesEventNumbersWithAGap) {
  TempDir dir;
  Rng rng;
  makeRun(dir, rng);
  const std::string trace = dir.file("proc-11.dtrace");
  const int64_t gone = rng.range(1, 40);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(trace.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, fmt::format("DELETE FROM events WHERE seq = {}", gone).c_str(), nullptr, nullptr, nullptr),
            SQLITE_OK);
  EXPECT_EQ(sqlite3_changes(db), 1);
  sqlite3_close(db);
  Output info = detrace("info " + dir.path().string());
  EXPECT_EQ(info.status, 2) << info.out;
  EXPECT_NE(info.out.find(trace + " holds "), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("the numbering has gaps"), std::string::npos) << info.out;
  Output diff = detrace(fmt::format("diff {0} {0}", dir.path().string()));
  EXPECT_EQ(diff.status, 2) << diff.out;
}

TEST(Cli, InfoJsonCountsMatchWhatWasWritten) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  MadeRun made = makeRun(dir, rng);
  Output o = detrace(fmt::format("info {} --json", dir.path().string()));
  ASSERT_EQ(o.status, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["manifest"]["command"][1], "serve.py");
  auto kinds = j["ranks"][0]["events_by_kind"];
  EXPECT_EQ(kinds.value("kernel", 0), made.kernels);
  EXPECT_EQ(kinds.value("gemm", 0), made.gemms);
  EXPECT_EQ(kinds.value("collective", 0), made.collectives);
  EXPECT_EQ(j["ranks"][0]["events"], made.kernels + made.gemms + made.collectives);

  Output table = detrace(fmt::format("info {}", dir.path().string()));
  ASSERT_EQ(table.status, 0) << table.out;
  EXPECT_NE(table.out.find("python serve.py"), std::string::npos) << table.out;
}

TEST(Cli, ExportIsValidChromeTraceWithArgs) {
  TempDir dir;
  Rng rng;
  MadeRun made = makeRun(dir, rng);
  std::string json_path = dir.file("out.json");
  Output o = detrace(fmt::format("export {} --format perfetto -o {}", dir.path().string(), json_path));
  ASSERT_EQ(o.status, 0) << o.out;
  std::ifstream in(json_path);
  auto j = nlohmann::json::parse(in);
  int64_t slices0 = 0, gemm_args = 0, ll128 = 0;
  std::set<int> pids;
  for (const auto& e : j["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M") continue;
    EXPECT_EQ(e["name"], "my_kernel\"with\\quotes");
    EXPECT_EQ(e["tid"], 1);  // stream 0 -> tid 1
    if (e["pid"] == 0) ++slices0;
    if (e.value("cat", "") == "gemm" && e["args"].contains("k")) ++gemm_args;
    if (e.value("cat", "") == "collective" && e["args"].value("proto", "") == "LL128") ++ll128;
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(slices0, made.kernels + made.gemms + made.collectives);
  EXPECT_GE(gemm_args, made.gemms);
  EXPECT_GE(ll128, made.collectives);
}

TEST(Cli, BadInputGivesOneSentenceAndExitStatus2) {
  TempDir dir;
  std::ofstream(dir.file("junk.dtrace")) << "not a trace";
  Output junk = detrace(fmt::format("info {}", dir.file("junk.dtrace")));
  EXPECT_EQ(junk.status, 2);
  EXPECT_NE(junk.out.find("detrace: error:"), std::string::npos) << junk.out;
  EXPECT_NE(junk.out.find("not a detrace trace"), std::string::npos) << junk.out;
  Output missing = detrace("info /definitely/not/here");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.out.find("does not exist"), std::string::npos);
  Output flag = detrace("info --no-such-flag x");
  EXPECT_EQ(flag.status, 2);
  Output fmt_bad = detrace(fmt::format("export {} --format csv -o x", dir.path().string()));
  EXPECT_EQ(fmt_bad.status, 2);
}

// Under --json a failing command prints an error object on stdout (a script reads JSON either
// way) besides its sentence on stderr; a --json after `--` is the recorded command's, not detrace's.
TEST(Cli, UnderJsonAnErrorIsAJsonObjectOnStdout) {
  TempDir dir;
  for (const std::string& args : {std::string("info /definitely/not/here --json"),
                                  std::string("diff /definitely/not/here /definitely/not/here2 --json"),
                                  std::string("replay /definitely/not/here --event 1 --json")}) {
    SCOPED_TRACE(args);
    Output o = testing::runShell(fmt::format("{} {} 2>/dev/null", testing::detraceExe(), args), /*with_stderr=*/false);
    EXPECT_EQ(o.status, 2);
    const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << o.out;
    EXPECT_EQ(j.value("exit_status", 0), 2);
    ASSERT_TRUE(j.contains("error")) << o.out;
    EXPECT_EQ(j["error"].value("code", ""), "not found") << o.out;
    EXPECT_NE(j["error"].value("message", "").find("/definitely/not/here"), std::string::npos) << o.out;
  }
  Output own = testing::runShell(
      fmt::format("{} record -o {} -- /definitely/not/here --json 2>/dev/null", testing::detraceExe(), dir.file("r")),
      /*with_stderr=*/false);
  EXPECT_EQ(own.status, 2);
  EXPECT_EQ(own.out, "") << "the recorded command's --json was taken for detrace's";
}

// Export never writes over the run it reads, leaves no partial file when the disk is full, and an
// output that did not reach its destination (stdout to a full disk) is exit status 2, not 0.
TEST(Cli, OutputsThatCannotBeWrittenAreErrorsAndTheRunIsNeverOverwritten) {
  TempDir dir;
  Rng rng;
  makeRun(dir, rng);
  const std::string rank0 = dir.file("proc-10.dtrace");
  const auto size_before = std::filesystem::file_size(rank0);
  Output onto_trace = detrace(fmt::format("export {} -o {}", dir.path().string(), rank0));
  EXPECT_EQ(onto_trace.status, 2) << onto_trace.out;
  EXPECT_NE(onto_trace.out.find("one of the run's own files"), std::string::npos) << onto_trace.out;
  EXPECT_EQ(std::filesystem::file_size(rank0), size_before) << "the export wrote over its input";
  Output onto_manifest = detrace(fmt::format("export {} -o {}/manifest.json", dir.path().string(), dir.path().string()));
  EXPECT_EQ(onto_manifest.status, 2) << onto_manifest.out;
  EXPECT_TRUE(db::readManifest(dir.path().string()).isOk());
  // The run opened by one of its trace files: its manifest is still its own.
  Output by_file = detrace(fmt::format("export {} -o {}/manifest.json", rank0, dir.path().string()));
  EXPECT_EQ(by_file.status, 2) << by_file.out;
  EXPECT_NE(by_file.out.find("one of the run's own files"), std::string::npos) << by_file.out;
  EXPECT_TRUE(db::readManifest(dir.path().string()).isOk());

  Output full = detrace(fmt::format("export {} -o /dev/full", dir.path().string()));
  EXPECT_EQ(full.status, 2) << full.out;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/full")) << "the export replaced /dev/full";

  // stderr to the test's pipe, stdout to the full disk.
  Output info_full = testing::runShell(
      fmt::format("{}/replay/detrace info {} --json 2>&1 >/dev/full", DETRACE_BINARY_DIR, dir.path().string()),
      /*with_stderr=*/false);
  EXPECT_EQ(info_full.status, 2) << info_full.out;
  EXPECT_NE(info_full.out.find("writing the output failed"), std::string::npos) << info_full.out;
  Output closed = detrace(fmt::format("info {} >&-", dir.path().string()));
  EXPECT_EQ(closed.status, 2) << closed.out;
}

// `detrace --help` lists every command on one line (its first sentence; the whole text is in its
// own --help), and number options show a plain type name, not CLI11's validator text.
TEST(Cli, HelpListsEachCommandOnOneLine) {
  Output top = detrace("--help");
  EXPECT_EQ(top.status, 0) << top.out;
  const size_t list = top.out.find("Subcommands:\n");
  ASSERT_NE(list, std::string::npos) << top.out;
  std::istringstream lines(top.out.substr(list + 13));
  std::set<std::string> commands;
  for (std::string line; std::getline(lines, line) && !line.empty();) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    EXPECT_TRUE(commands.insert(name).second) << "listed twice: " << line;
    EXPECT_LT(line.size(), 200u) << line;
  }
  EXPECT_EQ(commands, (std::set<std::string>{"attach", "bisect", "diff", "export", "info", "record", "replay", "schema"}));
  EXPECT_NE(top.out.find("Record an unmodified GPU program into RUN_DIR (detrace record --help)"), std::string::npos);
  Output record = detrace("record --help");
  EXPECT_NE(record.out.find("--queue N "), std::string::npos) << record.out;
  EXPECT_EQ(record.out.find("INT>=0"), std::string::npos) << record.out;
  EXPECT_EQ(record.out.find("INT in ["), std::string::npos) << record.out;
}

// A command line detrace refuses gets one "detrace: error:" sentence that names the problem and
// the help to read, and exit status 2.
TEST(Cli, RefusedCommandLinesGetOneReadableSentence) {
  const std::pair<const char*, const char*> cases[] = {
      {"infos x", "no command 'infos'; the commands are"},
      {"diff a b --rank -1", "--rank: must be a whole number, 0 or more (got '-1')"},
      {"replay x --event abc", "--event: must be a whole number, 0 or more (got 'abc')"},
      {"info --no-such-flag x", "unknown option --no-such-flag for detrace info (see detrace info --help)"},
      {"--rank 1 diff a b", "--rank goes after the command's name: detrace diff --rank 1 a b"},
      {"--no-such-flag info x", "unknown option --no-such-flag for detrace info"},
      {"record -o /tmp/x --bogus -- true", "unknown option --bogus for detrace record (see detrace record --help)"},
      {"record -o/tmp/x --bogus -- true", "unknown option --bogus for detrace record"},  // -o's value attached
      {"record -o -x --bogus -- true", "unknown option --bogus for detrace record"},    // a value like a flag
      {"record -o /tmp/x python app.py --model m",
       "put the command to run after --: detrace record -o /tmp/x -- python app.py --model m"},
      {"record -o /tmp/x --queue 5 -- true", "--queue: must be a whole number from 1024 to 16777216 (got '5')"},
      {"record -o /tmp/x --queue -5 -- true", "--queue: must be a whole number from 1024 to 16777216 (got '-5')"},
      {"bisect --repeat 0 -- a -- b", "--repeat: must be a whole number from 1 to 1000 (got '0')"},
      {"replay x --event 7 --impl , --no-gpu", "--impl names no implementation"},
      {"replay x --event 7 --impl ,,, --repeat 2", "--impl names no implementation"},  // not "--repeat"
      {"replay x --event 7 --impl '' --repeat 2", "--impl names no implementation"},
      {"replay x --event 7 --impl a b", "The following argument was not expected: b"},
      {"replay x --event 7 --impl --no-gpu", "--impl took '--no-gpu' as an implementation's name"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    Output o = detrace(args);
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_EQ(o.out.rfind("detrace: error: ", 0), 0u) << o.out;
    EXPECT_NE(o.out.find(expected), std::string::npos) << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << "one line: " << o.out;
  }
}

// Requests that cannot mean what they say: a run diffed against itself is warned about; a replay
// whose every selected implementation was skipped ran nothing and says so with exit status 2; a
// negative copy budget and a bisect of three commands are refused.
TEST(Cli, DegenerateRequestsAreWarnedAboutOrRefused) {
  TempDir dir;
  Rng rng;
  makeRun(dir, rng);
  Output self = detrace(fmt::format("diff {0} {0}", dir.path().string()));
  EXPECT_EQ(self.status, 0) << self.out;
  EXPECT_NE(self.out.find("are the same run"), std::string::npos) << self.out;
#if DETRACE_TEST_HAVE_KERNELS  // replay runs the kernels/ library's implementations
  const std::string synth = std::string(DETRACE_TEST_DATA_DIR) + "/replay/synth";
  Output skipped = detrace(fmt::format("replay {} --event 7 --impl gpu --no-gpu", synth));
  EXPECT_EQ(skipped.status, 2) << skipped.out;
  EXPECT_NE(skipped.out.find("nothing ran"), std::string::npos) << skipped.out;
  // --json: the replay's object carries the exit status and the error (one object on stdout).
  Output skipped_json = testing::runShell(
      fmt::format("{} replay {} --event 7 --impl gpu --no-gpu --json 2>/dev/null", testing::detraceExe(), synth),
      /*with_stderr=*/false);
  EXPECT_EQ(skipped_json.status, 2);
  const nlohmann::json sj = nlohmann::json::parse(skipped_json.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(sj.is_object()) << skipped_json.out;
  EXPECT_EQ(sj.value("exit_status", 0), 2);
  ASSERT_TRUE(sj.contains("error")) << skipped_json.out;
  EXPECT_NE(sj["error"].value("message", "").find("nothing ran"), std::string::npos) << skipped_json.out;
  EXPECT_TRUE(sj.contains("implementations")) << "the replay's facts are kept";
  Output cpu = detrace(fmt::format("replay {} --event 7 --impl cpu --no-gpu --repeat 1", synth));
  EXPECT_EQ(cpu.status, 0) << cpu.out;
  // --impl's names: comma-separated, over several --impl, an empty one between commas left out.
  Output one = detrace(fmt::format("replay {} --event 2 --rank 2 --impl ring2,reversed/cpu,fp64 --no-gpu --json", synth));
  Output split = detrace(fmt::format("replay {} --event 2 --rank 2 --impl ring2,,reversed/cpu, --impl fp64 --no-gpu --json", synth));
  EXPECT_EQ(one.status, 0) << one.out;
  const nlohmann::json oj = nlohmann::json::parse(one.out, nullptr, false);
  const nlohmann::json spj = nlohmann::json::parse(split.out, nullptr, false);
  ASSERT_TRUE(oj.is_object() && spj.is_object()) << one.out << split.out;
  auto names = [](const nlohmann::json& j) {
    std::vector<std::string> n;
    for (const auto& i : j["implementations"]) n.push_back(i.value("name", ""));
    return n;
  };
  EXPECT_GE(names(oj).size(), 3u) << one.out;
  EXPECT_EQ(names(oj), names(spj)) << split.out;
#endif
  Output budget = detrace(fmt::format("record -o {} --max-capture-bytes -5 -- true", dir.file("r")));
  EXPECT_EQ(budget.status, 2) << budget.out;
  EXPECT_NE(budget.out.find("must be a positive size"), std::string::npos) << budget.out;
  Output signed_size = detrace(fmt::format("record -o {} --capture full --max-capture-bytes -1G -- true", dir.file("r2")));
  EXPECT_EQ(signed_size.status, 2) << signed_size.out;
  EXPECT_NE(signed_size.out.find("must be a positive size, e.g. 512M (got '-1G')"), std::string::npos) << signed_size.out;
  Output three = detrace("bisect -- true :: true :: true");
  EXPECT_EQ(three.status, 2) << three.out;
  EXPECT_NE(three.out.find("one :: between them"), std::string::npos) << three.out;
  // A recording that fails says why in the error itself (its log's last lines), not only in the
  // log; an empty log (a full disk) is said to be empty.
  const std::string missing = dir.file(fmt::format("no-such-program-{}", rng.range(0, 1 << 30)));
  Output failed = detrace(fmt::format("bisect --workdir {} -- {}", dir.file("bw"), missing));
  EXPECT_EQ(failed.status, 2) << failed.out;
  // (What `detrace record` said: the program is missing, or, in a build without the tracer, that.)
  EXPECT_NE(failed.out.find(fmt::format("its log {}/digest-a.log ends: detrace: error: ", dir.file("bw"))),
            std::string::npos) << failed.out;
}

TEST(Cli, DocsSchemaMatchesTheDeclaredSchema) {
  std::ifstream in(std::string(DETRACE_SOURCE_DIR) + "/docs/schema.md");
  ASSERT_TRUE(in) << "docs/schema.md missing: run `detrace schema > docs/schema.md`";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), db::schemaMarkdown())
      << "docs/schema.md is stale: regenerate it with `detrace schema > docs/schema.md`";
  Output o = detrace("schema");
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.out, db::schemaMarkdown());
}

}  // namespace
}  // namespace detrace

namespace detrace {
namespace {

TEST(Cli, DiffExitStatusIsZeroOneOrTwo) {
  testing::TempDir a, b;
  testing::Rng rng;
  makeRun(a, rng);
  makeRun(b, rng);  // different random content: divergent
  Output same = detrace(fmt::format("diff {} {}", a.path().string(), a.path().string()));
  EXPECT_EQ(same.status, 0) << same.out;
  EXPECT_NE(same.out.find("IDENTICAL"), std::string::npos) << same.out;
  Output differ = detrace(fmt::format("diff {} {} --json", a.path().string(), b.path().string()));
  EXPECT_EQ(differ.status, 1) << differ.out;
  auto j = nlohmann::json::parse(differ.out);
  EXPECT_EQ(j["identical"], false);
  EXPECT_EQ(j["verdict"], "divergent");
  EXPECT_EQ(j["exit_status"], 1);
  Output bad = detrace(fmt::format("diff {} /no/such/run", a.path().string()));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.out.find("does not exist"), std::string::npos);

  // A copy of A whose rank 1 file was cut to nothing (its process killed as it began): rank 0
  // matches, rank 1 cannot be compared: INCOMPLETE, exit status 2 (was: IDENTICAL, 0); with three
  // runs, the copy is a class of its own, the file it left out named once.
  testing::TempDir c;
  for (const char* f : {"proc-10.dtrace", "proc-11.dtrace", "manifest.json"}) {
    std::filesystem::copy_file(a.file(f), c.file(f));
  }
  std::filesystem::resize_file(c.file("proc-11.dtrace"), 0);
  Output partial = detrace(fmt::format("diff {} {}", a.path().string(), c.path().string()));
  EXPECT_EQ(partial.status, 2) << partial.out;
  EXPECT_NE(partial.out.find("INCOMPLETE"), std::string::npos) << partial.out;
  EXPECT_NE(partial.out.find("proc-11.dtrace"), std::string::npos) << partial.out;
  // info names the missing rank without contradicting the warning that names its file.
  Output info = detrace(fmt::format("info {}", c.path().string()));
  EXPECT_NE(info.out.find("rank 1 has no readable trace file (its file may be one of those left out below"),
            std::string::npos) << info.out;
  // --json: a script that reads `identical` is not told the runs are identical.
  Output partial_json = detrace(fmt::format("diff {} {} --json", a.path().string(), c.path().string()));
  EXPECT_EQ(partial_json.status, 2) << partial_json.out;
  auto pj = nlohmann::json::parse(partial_json.out);
  EXPECT_EQ(pj["identical"], false);
  EXPECT_EQ(pj["complete"], false);
  EXPECT_EQ(pj["verdict"], "incomplete");
  EXPECT_EQ(pj["exit_status"], 2);
  Output three_json = detrace(fmt::format("diff {0} {0} {1} --json", a.path().string(), c.path().string()));
  EXPECT_EQ(three_json.status, 2) << three_json.out;
  EXPECT_EQ(nlohmann::json::parse(three_json.out)["exit_status"], 2);
  Output three = detrace(fmt::format("diff {0} {0} {1}", a.path().string(), c.path().string()));
  EXPECT_EQ(three.status, 2) << three.out;
  EXPECT_NE(three.out.find("2 distinct behaviour(s) over 3 runs"), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("warning: " + c.path().string() + ": left out"), std::string::npos) << three.out;
}

}  // namespace
}  // namespace detrace
