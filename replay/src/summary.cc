#include "detrace/replay/summary.h"

#include "detrace/replay/deep_diff.h"

#include <cstring>
#include <ctime>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace detrace::replay {
namespace {

std::string human(int64_t n) {
  if (n >= 10'000'000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  if (n >= 10'000) return fmt::format("{:.1f}k", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

std::string duration(int64_t first, int64_t last) {
  if (first < 0 || last < first) return "-";
  double s = static_cast<double>(last - first) / 1e9;
  if (s >= 1) return fmt::format("{:.2f} s", s);
  return fmt::format("{:.2f} ms", s * 1e3);
}

std::string utc(int64_t ns) {
  if (ns <= 0) return "unknown";
  std::time_t t = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

int64_t kindCount(const RankSummary& r, db::EventKind k) {
  auto it = r.by_kind.find(k);
  return it == r.by_kind.end() ? 0 : it->second;
}

int64_t stat(const RankSummary& r, const char* key) {
  auto it = r.stats.find(key);
  return it == r.stats.end() ? 0 : it->second;
}

std::string metaOr(const RankSummary& r, const char* key, const char* fallback = "?") {
  auto it = r.meta.find(key);
  return it == r.meta.end() || it->second.empty() ? fallback : it->second;
}

}  // namespace

Result<RunSummary> summarize(const db::Run& run) {
  RunSummary s;
  s.path = run.path();
  s.world_size = run.worldSize();
  s.missing_ranks = run.missingRanks();
  s.warnings = run.warnings();
  if (run.noGpuWork()) {
    s.warnings.push_back(
        "no process of this run did GPU work (no CUDA, NCCL or cuBLAS call that detrace records): "
        "its rank 0 has no events, and detrace diff has nothing to compare");
  }
  s.idle_files = run.idleFiles();
  s.unfinished_files = run.unfinishedFiles();
  s.unreadable_files = run.unreadableFiles();
  s.has_manifest = run.hasManifest();
  s.manifest = run.manifest();
  for (const db::RankFile& rf : run.ranks()) {
    DETRACE_ASSIGN_OR_RETURN(auto reader, db::TraceReader::open(rf.path));
    RankSummary r;
    r.info = reader->rank();
    r.info.rank = rf.rank;
    r.path = rf.path;
    r.meta = reader->meta();
    r.finished = reader->finished();
    DETRACE_ASSIGN_OR_RETURN(r.events, reader->eventCount());
    DETRACE_ASSIGN_OR_RETURN(r.by_kind, reader->countsByKind());
    int64_t rows = 0;  // every event row, by kind: a gap in the numbering shows at no extra cost
    for (const auto& [kind, n] : r.by_kind) rows += n;
    DETRACE_RETURN_IF_ERROR(reader->checkDense(rows));
    DETRACE_ASSIGN_OR_RETURN(db::TimeSpan span, reader->timeSpan());
    r.first_ns = span.first_ns;
    r.last_ns = span.last_ns;
    DETRACE_ASSIGN_OR_RETURN(r.stats, reader->stats());
    s.ranks.push_back(std::move(r));
  }
  return s;
}

namespace {

// "deep      rank 0: ops:1:3, 14 launch(es), 24 allocation(s) reached, 258 MiB zero-filled, ..."
// for the ranks recorded with --deep; "" for none.
std::string deepLines(const RunSummary& s) {
  std::string out;
  for (const RankSummary& r : s.ranks) {
    auto window = r.meta.find("deep_window");
    if (window == r.meta.end()) continue;
    int64_t launches = stat(r, "deep_launches");
    out += fmt::format(
        "deep      rank {}: window {}, {} launch(es) fingerprinted, {} allocation target(s), {} "
        "zero-filled, {} host time per launch\n",
        r.info.rank, window->second, launches, stat(r, "deep_targets"),
        bytesText(stat(r, "deep_zero_filled_bytes")),
        launches > 0 ? fmt::format("{:.1f} us", stat(r, "deep_host_ns") / 1e3 / launches) : "-");
  }
  return out;
}

// What went missing in a deep window: each is a reason the diff may not name the kernel. Each
// warning adds up its stats and takes the rank and that sum.
struct DeepWarning {
  std::vector<const char*> stats;
  const char* text;
};

const std::vector<DeepWarning>& deepWarningTable() {
  static const std::vector<DeepWarning> table = {
      {{"deep_params_lost", "fingerprints_skipped_ring_full", "fingerprints_lost"},
       "rank {} lost {} deep-window record(s) (parameters or digests): the window produced more "
       "than the tracer could keep up with; record a smaller --deep window"},
      {{"deep_zero_fill_failed"},
       "rank {} could not zero-fill {} allocation(s): memory the program reads before writing may "
       "differ between runs"},
      {{"deep_zero_fill_skipped_managed", "deep_zero_fill_skipped_graph_capture"},
       "rank {}: {} allocation(s) were not zero-filled (managed memory, or made while a stream was "
       "being captured): memory the program reads before writing may differ between runs"},
      {{"deep_params_missing", "deep_params_too_large"},
       "rank {}: {} deep launch(es) passed parameters the tracer could not read (none given, or "
       "more than a launch may pass) and were not fingerprinted"},
      {{"deep_pointer_words_ignored"},
       "rank {}: {} pointer argument(s) reached past the first 64 allocations of their launch and "
       "were not digested"},
      {{"deep_allocations_refused"},
       "rank {}: {} allocation(s) could not be tracked (the allocation map was full): pointers "
       "into them were not digested"},
      {{"deep_no_param_layout"},
       "rank {}: {} deep launch(es) had no parameter layout from the driver (cuFuncGetParamInfo) "
       "and were not fingerprinted"},
  };
  return table;
}

void deepWarnings(const RankSummary& r, std::string& out) {
  if (r.meta.count("deep_window") == 0) return;
  for (const DeepWarning& w : deepWarningTable()) {
    int64_t n = 0;
    for (const char* name : w.stats) n += stat(r, name);
    if (n > 0) out += "\nwarning: " + fmt::format(fmt::runtime(w.text), r.info.rank, n);
  }
}

// How rank 0 was recorded: capture level, which GEMM operands got row digests, which graph replays
// got weight digests (when not every one), how kernels were placed, the window. Traces from before
// these were written say nothing: no line.
std::string captureLine(const RankSummary& r) {
  if (r.meta.find("capture") == r.meta.end()) return "";
  const std::string levels = metaOr(r, "capture");
  std::string out = fmt::format("capture   {}", levels);
  // Several levels (attach starts at different --capture): each op has what its start's level took.
  if (levels.find(',') != std::string::npos) out += " (in the order its captures used them)";
  if (metaOr(r, "capture") != "meta") out += ", row digests " + metaOr(r, "row_digests", "all");
  if (const std::string every = metaOr(r, "graph_weights_every", "1"); every != "1") {
    out += ", graph weights every " + every + " replays";
  }
  const std::string placement = metaOr(r, "kernel_placement", "");
  if (!placement.empty()) {
    out += placement == "correlation" ? ", kernels placed by correlation id"
                                      : ", kernels followed by launch callbacks";
  }
  if (auto w = r.meta.find("window"); w != r.meta.end()) out += ", window " + w->second;
  return out + "\n";
}

}  // namespace

std::string formatSummary(const RunSummary& s) {
  std::string out = fmt::format("run       {} ({} rank file(s), world size {})\n", s.path,
                                s.ranks.size(), s.world_size);
  if (s.has_manifest) {
    std::string cmd;
    for (const std::string& a : s.manifest.command) cmd += (cmd.empty() ? "" : " ") + a;
    out += fmt::format("command   {}\n", cmd.empty() ? "?" : cmd);
    std::string exit = s.manifest.exit_code >= 0 ? std::to_string(s.manifest.exit_code)
                                                 : std::string("unknown (still running or killed)");
    if (s.manifest.term_signal > 0) {
      exit += fmt::format(" (killed by signal {}, {})", s.manifest.term_signal, strsignal(s.manifest.term_signal));
    }
    out += fmt::format("recorded  {} on {}, exit {}\n", utc(s.manifest.start_time_ns),
                       s.manifest.host.empty() ? "?" : s.manifest.host, exit);
  }
  if (!s.ranks.empty()) {
    const RankSummary& r0 = s.ranks.front();
    out += fmt::format("versions  detrace {} | driver {} | CUDA {} | NCCL {} | cuBLAS {}\n",
                       metaOr(r0, "tool_version"), metaOr(r0, "driver_version"),
                       metaOr(r0, "cuda_version"), metaOr(r0, "nccl_version"),
                       metaOr(r0, "cublas_version"));
    out += captureLine(r0);
  }
  out += deepLines(s);
  out += fmt::format("\n{:>4}  {:>3}  {:<20} {:>8}  {:>8}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>10}  {:>8}\n",
                     "rank", "dev", "gpu", "pid", "events", "kernels", "gemms", "colls", "markers",
                     "other", "span", "dropped");
  for (const RankSummary& r : s.ranks) {
    int64_t known = kindCount(r, db::EventKind::kKernel) + kindCount(r, db::EventKind::kGemm) +
                    kindCount(r, db::EventKind::kCollective) + kindCount(r, db::EventKind::kMarker);
    out += fmt::format(
        "{:>4}  {:>3}  {:<20.20} {:>8}  {:>8}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>10}  {:>8}\n",
        r.info.rank, r.info.device, r.info.gpu_name.empty() ? "?" : r.info.gpu_name, r.info.pid,
        human(r.events), human(kindCount(r, db::EventKind::kKernel)),
        human(kindCount(r, db::EventKind::kGemm)), human(kindCount(r, db::EventKind::kCollective)),
        human(kindCount(r, db::EventKind::kMarker)), human(r.events - known),
        duration(r.first_ns, r.last_ns), human(stat(r, "events_dropped")));
  }
  // Consecutive missing ranks as one line each run of them (a world of thousands stays short).
  // Where files were left out as unreadable, a missing rank's may be one of them (named below).
  const char* why = s.unreadable_files.empty()
                        ? "(crashed, or not recorded)"
                        : "(its file may be one of those left out below as unreadable; else crashed, or not recorded)";
  for (size_t i = 0; i < s.missing_ranks.size();) {
    size_t j = i;
    while (j + 1 < s.missing_ranks.size() && s.missing_ranks[j + 1] == s.missing_ranks[j] + 1) ++j;
    if (i == j) {
      out += fmt::format("\nwarning: rank {} has no readable trace file {}", s.missing_ranks[i], why);
    } else {
      out += fmt::format("\nwarning: ranks {} to {} have no readable trace file {}", s.missing_ranks[i],
                         s.missing_ranks[j], why);
    }
    i = j + 1;
  }
  for (const std::string& w : s.warnings) out += fmt::format("\nwarning: {}", w);
  for (const std::string& f : s.unfinished_files) {
    out += fmt::format("\nwarning: {} was not finished: its process was killed, is still running, or "
                       "stopped recording on a write error (a full disk, the file-size limit: its "
                       "stderr says which). It holds everything committed before; its drop counts "
                       "stop there",
                       f);
  }
  if (!s.idle_files.empty()) {
    out += fmt::format("\n{} more process(es) did no GPU work and are not ranks (a launcher such as "
                       "torchrun's agent, a shell): {}\n",
                       s.idle_files.size(), fmt::join(s.idle_files, ", "));
  }
  size_t before_warnings = out.size();
  for (const RankSummary& r : s.ranks) deepWarnings(r, out);
  bool deep_warned = out.size() != before_warnings;
  const size_t before_rank_warnings = out.size();
  for (const RankSummary& r : s.ranks) {
    if (stat(r, "events_dropped") > 0 || stat(r, "operands_dropped") > 0) {
      out += fmt::format(
          "\nwarning: rank {} dropped {} events and {} operands: the recorder's queue was full; "
          "record fewer details (e.g. --capture digest) or raise --queue",
          r.info.rank, stat(r, "events_dropped"), stat(r, "operands_dropped"));
    }
    // NCCL loaded, collectives recorded, the plugin never initialized (traces from before the
    // counter have none: no warning).
    const int64_t colls = kindCount(r, db::EventKind::kCollective);
    if (r.meta.count("nccl_version") != 0 && r.stats.count("nccl_profiler_inits") != 0 &&
        stat(r, "nccl_profiler_inits") == 0 && colls > 0) {
      out += fmt::format(
          "\nwarning: rank {}: NCCL {} never loaded detrace's profiler plugin (it needs NCCL 2.28 or "
          "later, whose plugin API v5 detrace implements, and NCCL_PROFILER_PLUGIN left to `detrace "
          "record`): its {} collective(s) carry no algorithm, protocol or channel count",
          r.info.rank, r.meta.at("nccl_version"), colls);
    }
    if (const int64_t n = stat(r, "nccl_comms_unfollowed"); n > 0) {
      out += fmt::format(
          "\nwarning: rank {}: {} NCCL communicator(s) split or shrunk from a non-blocking "
          "communicator were not followed (their handle left the slot NCCL wrote it to before their "
          "first call); their calls have no communicator id or sequence number, "
          "so `detrace diff` cannot match them across ranks",
          r.info.rank, n);
    }
    if (const int64_t n = stat(r, "nccl_simulated_calls_written"); n > 0) {
      out += fmt::format(
          "\nwarning: rank {}: {} NCCL call(s) of a group only simulated (ncclGroupSimulateEnd) were "
          "written as if they had run (a capture stop came before the group's end, or they came past "
          "its 4096th call); the next call on each of their communicators repeats their sequence number",
          r.info.rank, n);
    }
    if (const int64_t n = stat(r, "nccl_comms_revoked"); n > 0) {
      out += fmt::format(
          "\nwarning: rank {} revoked {} NCCL communicator(s) (ncclCommRevoke): {} call(s) still being "
          "made then were recorded without their outputs' fingerprints; the outputs of calls already "
          "made may have been fingerprinted after NCCL stopped them, so a difference there in `detrace "
          "diff` may be the revoke's",
          r.info.rank, n, stat(r, "nccl_calls_revoked"));
    }
    if (const int64_t n = stat(r, "nccl_group_calls_past_cap"); n > 0) {
      out += fmt::format(
          "\nwarning: rank {}: {} NCCL call(s) came past the 4096th of one group (a group that large, or "
          "an ncclGroupStart never ended) and were recorded without their outputs' fingerprints or "
          "NCCL's choices",
          r.info.rank, n);
    }
  }
  const bool rank_warned = out.size() != before_rank_warnings;
  if (!s.missing_ranks.empty() || !s.warnings.empty() || !s.unfinished_files.empty() || deep_warned ||
      rank_warned) {
    out += "\n";
  }
  return out;
}

nlohmann::json summaryJson(const RunSummary& s) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSummary& r : s.ranks) {
    nlohmann::json kinds = nlohmann::json::object();
    for (auto [k, n] : r.by_kind) kinds[db::eventKindName(k)] = n;
    ranks.push_back({{"rank", r.info.rank}, {"world_size", r.info.world_size},
                     {"device", r.info.device}, {"pid", r.info.pid}, {"host", r.info.host},
                     {"gpu_name", r.info.gpu_name}, {"path", r.path}, {"events", r.events},
                     {"events_by_kind", kinds}, {"first_ns", r.first_ns}, {"last_ns", r.last_ns},
                     {"stats", r.stats}, {"meta", r.meta}, {"finished", r.finished}});
  }
  nlohmann::json j = {{"path", s.path},       {"world_size", s.world_size},
                      {"ranks", ranks},       {"missing_ranks", s.missing_ranks},
                      {"warnings", s.warnings}, {"idle_files", s.idle_files},
                      {"unfinished_files", s.unfinished_files},
                      {"unreadable_files", s.unreadable_files}};
  if (s.has_manifest) {
    j["manifest"] = {{"command", s.manifest.command}, {"host", s.manifest.host},
                     {"start_time_ns", s.manifest.start_time_ns},
                     {"end_time_ns", s.manifest.end_time_ns}, {"exit_code", s.manifest.exit_code},
                     {"term_signal", s.manifest.term_signal},
                     {"tool_version", s.manifest.tool_version}, {"env", s.manifest.env},
                     {"options", s.manifest.options}};
  }
  return j;
}

}  // namespace detrace::replay
