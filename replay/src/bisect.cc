// See bisect.h.
#include "detrace/replay/bisect.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>

#include "bisect_deep.h"

extern char** environ;

namespace detrace::replay {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Quotes an argument for a shell command line shown to the user.
std::string shellQuote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                        std::string::npos) {
    return a;
  }
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string joinCommand(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + shellQuote(a);
  return s;
}

// Runs argv with stdout and stderr to `log`; returns its exit status (128 + N for signal N).
Result<int> runLogged(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return makeError(ErrorCode::kIo, "cannot run {}: {}", argv[0], std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return makeError(ErrorCode::kIo, "waiting for {}: {}", argv[0], std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The last lines of a step's log (at most 3 and 400 bytes), for its error: the recording's own
// words ("no such file", a full disk). An empty log is said to be so, with the likely cause (a
// signal, by `status`, the step's exit status; else a full disk).
std::string logTail(const std::string& log, int status) {
  std::ifstream in(log, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty() && status > 128) {  // `detrace record` says why it fails, unless killed
    return fmt::format("detrace record was killed by signal {} before it wrote anything to {} (the "
                       "OOM killer?)",
                       status - 128, log);
  }
  if (lines.empty()) {
    return fmt::format("{} is empty: nothing could be written there (is its disk full?)", log);
  }
  const size_t first = lines.size() > 3 ? lines.size() - 3 : 0;
  std::string tail;
  for (size_t i = first; i < lines.size(); ++i) tail += (i > first ? " / " : "") + lines[i];
  if (tail.size() > 400) tail = "..." + tail.substr(tail.size() - 400);
  return fmt::format("its log {} ends: {}", log, tail);
}

// What must match between the suspect in the digest run and in the re-recorded run: kind and
// shape ("gemm 1024x8x2816", "collective AllReduce 4096").
Result<std::string> opSignature(const db::Run& run, int32_t rank, int64_t seq) {
  DETRACE_ASSIGN_OR_RETURN(auto reader, run.openRank(rank));
  DETRACE_ASSIGN_OR_RETURN(auto gemms, reader->gemms());
  for (const auto& [s, g] : gemms) {
    if (s == seq) return fmt::format("gemm {}x{}x{} batch {}", g.m, g.n, g.k, g.batch_count);
  }
  DETRACE_ASSIGN_OR_RETURN(auto colls, reader->collectives());
  for (const auto& [s, c] : colls) {
    if (s == seq) return fmt::format("collective {} {}", db::collOpName(c.op), c.count);
  }
  return makeError(ErrorCode::kNotFound, "event {} of rank {} is not a library op", seq, rank);
}

// The re-recorded run must hold the same op at the same library-op index, or the program's
// sequence of GEMMs and collectives changed between runs and the replay would convict another op.
Status checkSameOp(const db::Run& digest, int64_t digest_seq, const db::Run& full, int64_t full_seq,
                   int32_t rank, int64_t index) {
  DETRACE_ASSIGN_OR_RETURN(std::string was, opSignature(digest, rank, digest_seq));
  DETRACE_ASSIGN_OR_RETURN(std::string now, opSignature(full, rank, full_seq));
  if (was != now) {
    return makeError(ErrorCode::kInvalidArgument,
                     "library op {} of rank {} was {} in the first recording but {} when recorded "
                     "again: the program does not repeat its sequence of GEMMs and collectives, so "
                     "bisect cannot capture the same op",
                     index, rank, was, now);
  }
  return Status::ok();
}

class Bisector {
 public:
  explicit Bisector(const BisectOptions& o) : o_(o) {}
  Result<BisectResult> run();

 private:
  void say(const std::string& line) const {
    if (o_.progress) o_.progress(line);
  }
  Result<std::string> record(const std::string& name, const std::vector<std::string>& command,
                             const std::vector<std::string>& capture);
  Status diffDigestRuns(const std::string& a, const std::string& b);
  Status replaySuspect(const std::vector<std::string>& cmd_a, const std::vector<std::string>& cmd_b);
  void deepStep();
  Status recordDeep(const std::string& window);
  std::string verdict() const;

  BisectOptions o_;
  BisectResult r_;
  std::string exe_;
};

Result<std::string> Bisector::record(const std::string& name, const std::vector<std::string>& command,
                                     const std::vector<std::string>& capture) {
  std::string dir = (fs::path(o_.workdir) / name).string();
  std::vector<std::string> argv = {exe_, "record", "-o", dir, "--force"};
  argv.insert(argv.end(), capture.begin(), capture.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  std::string shown = "detrace " + joinCommand(std::vector<std::string>(argv.begin() + 1, argv.end()));
  say(fmt::format("recording {} ...", name));
  auto t0 = Clock::now();
  DETRACE_ASSIGN_OR_RETURN(int status, runLogged(argv, dir + ".log"));
  BisectStep step{"record " + name, shown, since(t0), ""};
  if (status != 0) {
    step.outcome = fmt::format("failed with status {} (log: {}.log)", status, dir);
    r_.steps.push_back(step);
    return makeError(ErrorCode::kUnavailable, "recording {} failed with status {}; {}", name, status,
                     logTail(dir + ".log", status));
  }
  step.outcome = "recorded into " + dir;
  r_.steps.push_back(step);
  return dir;
}

Status Bisector::diffDigestRuns(const std::string& a, const std::string& b) {
  say("diffing the two runs ...");
  auto t0 = Clock::now();
  DETRACE_ASSIGN_OR_RETURN(db::Run run_a, db::Run::open(a));
  DETRACE_ASSIGN_OR_RETURN(db::Run run_b, db::Run::open(b));
  DiffOptions d;
  d.keep_differing = false;
  d.batch = o_.batch;
  DETRACE_ASSIGN_OR_RETURN(RunDiff diff, diffRuns(run_a, run_b, d));
  BisectStep step{"diff", "detrace diff " + shellQuote(a) + " " + shellQuote(b), since(t0), ""};
  r_.diverged = !diff.identical();
  r_.incomplete = !r_.diverged && !diff.complete();
  r_.uncompared_ranks = diff.uncompared_ranks;
  r_.warnings = diff.warnings;
  if (r_.diverged) {
    r_.rank = *diff.origin_rank;
    const RankDiff* rd = nullptr;
    for (const RankDiff& x : diff.ranks) {
      if (x.rank == r_.rank) rd = &x;
    }
    if (rd != nullptr && rd->first) {
      r_.seq_a = rd->first->a;
      r_.seq_b = rd->first->b;
      r_.classification = pairStatusName(rd->first->status);
      r_.suspect = rd->first_a.empty() || r_.seq_a < 0 ? rd->first_b : rd->first_a;
      r_.why = rd->why;
      r_.entered_after = rd->entered_after;
      step.outcome = fmt::format("divergence begins on rank {} at {} ({})", r_.rank, r_.suspect, r_.classification);
    }
  } else {
    step.outcome = "the runs are identical";
  }
  r_.diff = std::move(diff);
  r_.steps.push_back(step);
  return Status::ok();
}

// Re-records the suspect op with its operands captured (both programs for a batch pair) and
// replays it.
Status Bisector::replaySuspect(const std::vector<std::string>& cmd_a, const std::vector<std::string>& cmd_b) {
  DETRACE_ASSIGN_OR_RETURN(db::Run digest_a, db::Run::open((fs::path(o_.workdir) / "digest-a").string()));
  DETRACE_ASSIGN_OR_RETURN(db::Run digest_b, db::Run::open((fs::path(o_.workdir) / "digest-b").string()));
  if (r_.seq_a < 0) return makeError(ErrorCode::kUnavailable, "the first divergence is absent from run A");
  auto ia = libraryOpIndex(digest_a, r_.rank, r_.seq_a);
  if (!ia.isOk()) return ia.status();
  r_.op_index_a = *ia;
  bool pair = !o_.command_b.empty() && r_.seq_b >= 0;
  if (pair) {
    DETRACE_ASSIGN_OR_RETURN(r_.op_index_b, libraryOpIndex(digest_b, r_.rank, r_.seq_b));
  }
  auto capture = [](int64_t index) {
    return std::vector<std::string>{"--capture", "full", "--capture-range", std::to_string(index)};
  };
  DETRACE_ASSIGN_OR_RETURN(std::string full_a, record("full-a", cmd_a, capture(r_.op_index_a)));
  std::string full_b;
  if (pair) {
    DETRACE_ASSIGN_OR_RETURN(full_b, record("full-b", cmd_b, capture(r_.op_index_b)));
  }
  DETRACE_ASSIGN_OR_RETURN(db::Run run_a, db::Run::open(full_a));
  DETRACE_ASSIGN_OR_RETURN(int64_t seq_a, libraryOpSeq(run_a, r_.rank, r_.op_index_a));
  DETRACE_RETURN_IF_ERROR(checkSameOp(digest_a, r_.seq_a, run_a, seq_a, r_.rank, r_.op_index_a));
  ReplayOptions ro;
  ro.repeat = o_.repeat;
  ro.allow_gpu = o_.allow_gpu;
  say("replaying the suspect ...");
  auto t0 = Clock::now();
  if (pair) {
    DETRACE_ASSIGN_OR_RETURN(db::Run run_b, db::Run::open(full_b));
    DETRACE_ASSIGN_OR_RETURN(int64_t seq_b, libraryOpSeq(run_b, r_.rank, r_.op_index_b));
    DETRACE_RETURN_IF_ERROR(checkSameOp(digest_b, r_.seq_b, run_b, seq_b, r_.rank, r_.op_index_b));
    DETRACE_ASSIGN_OR_RETURN(PairResult p, replayPair(run_a, {r_.rank, seq_a}, run_b, {r_.rank, seq_b}, ro));
    std::vector<std::string> invariant;
    for (const auto& i : p.impls) {
      if (i.invariant()) invariant.push_back(i.name);
    }
    r_.steps.push_back({"replay (pair)",
                        fmt::format("detrace replay {} --rank {} --event {} --pair {} --event-b {} --repeat {}",
                                    shellQuote(full_a), r_.rank, seq_a, shellQuote(full_b), seq_b, o_.repeat),
                        since(t0), fmt::format("batch-invariant with: {}", fmt::join(invariant, ", "))});
    r_.pair = std::move(p);
  } else {
    DETRACE_ASSIGN_OR_RETURN(ReplayResult rr, replayEvent(run_a, {r_.rank, seq_a}, ro));
    std::vector<std::string> nondet;
    for (const auto& i : rr.impls) {
      if (i.ran() && i.distinct > 1) nondet.push_back(fmt::format("{} ({} outputs)", i.name, i.distinct));
    }
    r_.steps.push_back({"replay",
                        fmt::format("detrace replay {} --rank {} --event {} --repeat {}", shellQuote(full_a),
                                    r_.rank, seq_a, o_.repeat),
                        since(t0),
                        nondet.empty() ? "every implementation was deterministic over the repeats"
                                       : fmt::format("nondeterministic: {}", fmt::join(nondet, ", "))});
    r_.replay = std::move(rr);
  }
  return Status::ok();
}

// The deep step (bisect_deep.h): records it, notes why it did not apply, or how it failed. Its
// failure is not the bisect's: the digest-level verdict stands without it.
void Bisector::deepStep() {
  auto digest_a = db::Run::open((fs::path(o_.workdir) / "digest-a").string());
  Result<detail::DeepPlan> plan = digest_a.isOk() ? detail::planDeepStep(o_, r_, *digest_a)
                                                  : Result<detail::DeepPlan>(digest_a.status());
  Status st = plan.isOk() ? Status::ok() : plan.status();
  if (st.isOk() && plan->window.empty()) {
    if (!plan->note.empty()) {
      r_.deep.emplace().skipped = plan->note;
      r_.steps.push_back({"deep window", "", 0, plan->note});
    }
    return;
  }
  if (st.isOk()) st = recordDeep(plan->window);
  if (!st.isOk()) {
    if (!r_.deep) r_.deep.emplace();
    r_.deep->skipped = "failed: " + st.message();
    r_.steps.push_back({"deep window", "", 0, r_.deep->skipped});
  }
}

// Records the stretch twice in deep mode and diffs the two runs.
Status Bisector::recordDeep(const std::string& window) {
  r_.deep.emplace().window = window;
  std::vector<std::string> deep = {"--capture", "digest", "--deep", window};
  DETRACE_ASSIGN_OR_RETURN(std::string a, record("deep-a", o_.command_a, deep));
  DETRACE_ASSIGN_OR_RETURN(std::string b, record("deep-b", o_.command_a, deep));
  say("diffing the deep runs ...");
  auto t0 = Clock::now();
  DETRACE_ASSIGN_OR_RETURN(db::Run run_a, db::Run::open(a));
  DETRACE_ASSIGN_OR_RETURN(db::Run run_b, db::Run::open(b));
  DiffOptions d;
  d.keep_differing = false;
  d.batch = false;
  d.rank = r_.rank;
  DETRACE_ASSIGN_OR_RETURN(RunDiff diff, diffRuns(run_a, run_b, d));
  detail::readDeepDiff(diff, r_.rank, *r_.deep);
  r_.steps.push_back({"diff (deep)", fmt::format("detrace diff {} {} --rank {}", shellQuote(a), shellQuote(b), r_.rank),
                      since(t0), detail::deepOutcome(*r_.deep)});
  return Status::ok();
}

// The implementation to recommend: a GPU one that ran, is not a control and is not the recorded
// kernel; else such a CPU one; "" if none.
template <typename Impls, typename Good>
std::string recommend(const Impls& impls, Good good) {
  for (bool gpu : {true, false}) {
    for (const auto& i : impls) {
      if (i.gpu == gpu && !i.control && i.name != "recorded" && i.name != "fp64" && good(i)) return i.name;
    }
  }
  return "";
}

std::string Bisector::verdict() const {
  if (r_.incomplete) {
    std::string v = fmt::format(
        "INCOMPLETE: no divergence on the ranks compared, but rank(s) {} were not compared (a trace "
        "file missing or unreadable in one recording: see the warnings), so bit-identity is not shown. "
        "Look at the recordings' logs and run bisect again.",
        fmt::join(r_.uncompared_ranks, ", "));
    for (const auto& w : r_.warnings) v += " Note: " + w + ".";
    return v;
  }
  if (!r_.diverged) {
    std::string v = o_.command_b.empty()
                        ? "The two recordings are bit-identical at every fingerprinted op: no run-to-run "
                          "divergence showed up. Record more runs (detrace diff RUN1 ... RUN8 groups them) or "
                          "compare two configurations with the two-command form (CMD_A :: CMD_B)."
                        : "The two programs agree at every fingerprinted op for the request's rows.";
    for (const auto& w : r_.warnings) v += " Note: " + w + ".";
    return v;
  }
  std::string v = fmt::format("Divergence begins on rank {} at {} ({}).", r_.rank, r_.suspect, r_.classification);
  if (r_.classification == pairStatusName(PairStatus::kPropagated)) return v + detail::propagatedVerdict(r_);
  if (r_.seq_a < 0) {
    return v + " The op exists in run B only (a schedule or shape difference), so there is nothing to "
               "replay: compare what each program launches around it.";
  }
  if (r_.op_index_a < 0 && r_.replay_error.find("not a GEMM or collective") != std::string::npos) {
    if (r_.classification == pairStatusName(PairStatus::kKernelSelection)) {
      return v + fmt::format(" {}. The kernel itself is the suspect; replay convicts GEMMs and "
                             "collectives only.",
                             r_.why);
    }
    return v + " It is not a GEMM or collective, so it cannot be replayed.";
  }
  if (!r_.replay_error.empty()) {
    return v + " The suspect could not be replayed: " + r_.replay_error + ".";
  }
  if (r_.replay) {
    const ReplayResult& rr = *r_.replay;
    v += fmt::format(" Replaying its captured operands ({} runs per implementation):", o_.repeat);
    bool any_nondet = false;
    for (const auto& i : rr.impls) {
      if (i.name == "recorded") {
        if (!i.skipped.empty()) v += fmt::format(" the recorded kernel could not be rerun ({});", i.skipped);
        else if (!i.error.empty()) v += fmt::format(" the recorded kernel failed ({});", i.error);
        else v += fmt::format(" the recorded kernel gave {} distinct output(s);", i.distinct);
      } else if (i.ran() && i.distinct > 1) {
        v += fmt::format(" {} gave {} distinct outputs;", i.name, i.distinct);
        any_nondet |= !i.control;
      }
    }
    std::vector<std::string> deterministic;
    for (const auto& i : rr.impls) {
      if (i.ran() && i.distinct == 1 && !i.control && i.name != "recorded" && i.name != "fp64") {
        deterministic.push_back(i.name);
      }
    }
    if (!deterministic.empty()) v += fmt::format(" deterministic over the repeats: {}.", fmt::join(deterministic, ", "));
    std::vector<std::string> reproducing = rr.reproducing();
    if (!reproducing.empty()) {
      v += fmt::format(" The recorded output is reproduced bit for bit by: {}.", fmt::join(reproducing, ", "));
    } else {
      v += " No implementation reproduced the recorded output bit for bit.";
    }
    if (!any_nondet) {
      v += " No deterministic implementation varied here, so the nondeterminism did not reproduce "
           "in isolation: it may depend on concurrent work or on inputs this op does not see.";
    }
  } else if (r_.pair) {
    std::vector<std::string> inv, var;
    for (const auto& i : r_.pair->impls) {
      if (!i.skipped.empty()) continue;
      (i.invariant() ? inv : var).push_back(i.name);
    }
    v += fmt::format(" Replaying the op at both batch sizes: the request's rows are identical with {}; "
                     "they differ with {}.",
                     inv.empty() ? std::string("no implementation") : fmt::format("{}", fmt::join(inv, ", ")),
                     var.empty() ? std::string("none") : fmt::format("{}", fmt::join(var, ", ")));
    std::string pick = recommend(r_.pair->impls, [](const PairImplResult& i) { return i.invariant(); });
    if (!pick.empty()) v += fmt::format(" Use a batch-invariant kernel for this op (e.g. {}).", pick);
  }
  return v;
}

Result<BisectResult> Bisector::run() {
  auto t0 = Clock::now();
  if (o_.command_a.empty()) {
    return makeError(ErrorCode::kInvalidArgument, "nothing to bisect: put the command after --");
  }
  exe_ = o_.detrace_exe;
  if (exe_.empty()) {
    std::error_code ec;
    exe_ = fs::read_symlink("/proc/self/exe", ec).string();
    if (ec) return makeError(ErrorCode::kNotFound, "cannot find the detrace executable: {}", ec.message());
  }
  std::error_code ec;
  fs::create_directories(o_.workdir, ec);
  if (ec) return makeError(ErrorCode::kIo, "cannot create the work directory {}: {}", o_.workdir, ec.message());
  const auto& cmd_b = o_.command_b.empty() ? o_.command_a : o_.command_b;
  std::vector<std::string> digest = {"--capture", "digest"};
  DETRACE_ASSIGN_OR_RETURN(std::string a, record("digest-a", o_.command_a, digest));
  DETRACE_ASSIGN_OR_RETURN(std::string b, record("digest-b", cmd_b, digest));
  DETRACE_RETURN_IF_ERROR(diffDigestRuns(a, b));
  if (r_.diff && r_.diff->unfingerprinted) {
    return makeError(ErrorCode::kUnavailable,
                     "the recordings carry no fingerprints, so bisect cannot tell where outputs part; "
                     "was the GPU digest disabled (DETRACE_DIGEST=0) or unavailable?");
  }
  if (r_.diverged && r_.classification != pairStatusName(PairStatus::kPropagated) && r_.seq_a >= 0) {
    Status st = replaySuspect(o_.command_a, cmd_b);
    if (!st.isOk()) {
      r_.replay_error = st.message();
      r_.steps.push_back({"replay", "", 0, "not replayed: " + st.message()});
    }
  }
  if (r_.diverged) deepStep();
  r_.verdict = verdict();
  r_.seconds = since(t0);
  return std::move(r_);
}

}  // namespace

namespace {

// The rank's library ops as called, in order: GEMMs and collectives without the replays of
// captured ones (graph_ops rows), which is what `detrace record --capture-range` counts. `replays`
// gets the replayed ops.
Result<std::vector<int64_t>> calledLibraryOps(db::TraceReader& reader,
                                              std::map<int64_t, db::GraphOp>* replays = nullptr) {
  DETRACE_ASSIGN_OR_RETURN(auto gemms, reader.gemms());
  DETRACE_ASSIGN_OR_RETURN(auto colls, reader.collectives());
  std::map<int64_t, db::GraphOp> replayed;
  DETRACE_RETURN_IF_ERROR(reader.forEachGraphOp([&](const db::GraphOp& g) {
    replayed.emplace(g.seq, g);
    return Status::ok();
  }));
  std::vector<int64_t> seqs;
  for (const auto& [s, g] : gemms) {
    if (!replayed.count(s)) seqs.push_back(s);
  }
  for (const auto& [s, c] : colls) {
    if (!replayed.count(s)) seqs.push_back(s);
  }
  std::sort(seqs.begin(), seqs.end());
  if (replays != nullptr) *replays = std::move(replayed);
  return seqs;
}

}  // namespace

Result<int64_t> libraryOpIndex(const db::Run& run, int32_t rank, int64_t seq) {
  DETRACE_ASSIGN_OR_RETURN(auto reader, run.openRank(rank));
  std::map<int64_t, db::GraphOp> replays;
  DETRACE_ASSIGN_OR_RETURN(auto seqs, calledLibraryOps(*reader, &replays));
  if (auto it = replays.find(seq); it != replays.end()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "event {} of rank {} is replay {} of a CUDA graph, of the op captured at event "
                     "{}: operands of graph replays are not copied, so it cannot be re-recorded or "
                     "replayed; replay the run without CUDA graphs, or the captured call",
                     seq, rank, it->second.replay, it->second.template_seq);
  }
  const auto pos = std::lower_bound(seqs.begin(), seqs.end(), seq);
  if (pos == seqs.end() || *pos != seq) {
    return makeError(ErrorCode::kInvalidArgument,
                     "event {} of rank {} is not a GEMM or collective: only library ops can be captured "
                     "and replayed",
                     seq, rank);
  }
  return pos - seqs.begin();
}

Result<int64_t> libraryOpSeq(const db::Run& run, int32_t rank, int64_t index) {
  DETRACE_ASSIGN_OR_RETURN(auto reader, run.openRank(rank));
  DETRACE_ASSIGN_OR_RETURN(auto seqs, calledLibraryOps(*reader));
  if (index < 0 || index >= static_cast<int64_t>(seqs.size())) {
    return makeError(ErrorCode::kNotFound, "rank {} of {} has {} library ops, not {}", rank, run.path(),
                     seqs.size(), index + 1);
  }
  return seqs[static_cast<size_t>(index)];
}

Result<BisectResult> bisect(const BisectOptions& options) { return Bisector(options).run(); }

std::string formatBisect(const BisectResult& r) {
  std::string out = "detrace bisect\n\n";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const BisectStep& s = r.steps[i];
    out += fmt::format("{}. {:<22} {:7.1f} s  {}\n", i + 1, s.what, s.seconds, s.outcome);
    if (!s.command.empty()) out += fmt::format("   $ {}\n", s.command);
  }
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  if (r.replay) out += "\n" + formatReplay(*r.replay);
  if (r.pair) out += "\n" + formatPair(*r.pair);
  out += fmt::format("\nVerdict ({:.1f} s in all):\n{}\n", r.seconds, r.verdict);
  return out;
}

nlohmann::json bisectJson(const BisectResult& r) {
  nlohmann::json j;
  j["diverged"] = r.diverged;
  j["complete"] = !r.incomplete;
  j["uncompared_ranks"] = r.uncompared_ranks;
  j["seconds"] = r.seconds;
  j["verdict"] = r.verdict;
  if (r.diverged) {
    j["rank"] = r.rank;
    j["seq_a"] = r.seq_a;
    j["seq_b"] = r.seq_b;
    j["op_index_a"] = r.op_index_a;
    j["op_index_b"] = r.op_index_b;
    j["suspect"] = r.suspect;
    j["classification"] = r.classification;
    j["why"] = r.why;
    if (r.entered_after) j["entered_after"] = *r.entered_after;
    if (!r.replay_error.empty()) j["replay_error"] = r.replay_error;
  }
  j["warnings"] = r.warnings;
  for (const auto& s : r.steps) {
    j["steps"].push_back({{"what", s.what}, {"command", s.command}, {"seconds", s.seconds}, {"outcome", s.outcome}});
  }
  if (r.replay) j["replay"] = replayJson(*r.replay);
  if (r.pair) j["pair"] = pairJson(*r.pair);
  detail::addDeepJson(r, j);
  return j;
}

}  // namespace detrace::replay
