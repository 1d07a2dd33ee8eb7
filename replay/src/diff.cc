// diffRuns and groupRuns: each rank of two runs diffed in turn (rank_differ.cc), then joined: the
// kernel-selection and NCCL choice tables, divergence carried across ranks by collectives, the
// rank where it began, and the warnings the comparison deserves.
#include "detrace/replay/diff.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "diff_internal.h"

namespace detrace::replay {

const char* pairStatusName(PairStatus status) {
  switch (status) {
    case PairStatus::kIdentical:
      return "identical";
    case PairStatus::kKernelSelection:
      return "kernel selection changed";
    case PairStatus::kNondeterministic:
      return "nondeterministic";
    case PairStatus::kPropagated:
      return "propagated";
    case PairStatus::kSchedule:
      return "schedule or shape difference";
    case PairStatus::kBatchVariant:
      return "batch-variant";
    case PairStatus::kReordered:
      return "reordered";
  }
  return "unknown";
}

int64_t RankDiff::count(PairStatus status) const {
  auto it = counts.find(status);
  return it != counts.end() ? it->second : 0;
}

const char* CollectiveChoiceChange::rows() const {
  if (changed > 0) return "changed";
  return unchanged == calls ? "unchanged" : "unknown";
}

BatchDim batchDimOf(std::span<const GemmInfo> a, std::span<const GemmInfo> b) {
  size_t n = std::min({a.size(), b.size(), kBatchDimGemms});
  bool m_differs = false, n_differs = false;
  for (size_t i = 0; i < n; ++i) {
    const GemmInfo& x = a[i];
    const GemmInfo& y = b[i];
    if (x.k != y.k) return BatchDim::kNone;
    m_differs |= x.m != y.m;
    n_differs |= x.n != y.n;
  }
  if (m_differs == n_differs) return BatchDim::kNone;  // neither, or both: not a batch pair
  return m_differs ? BatchDim::kM : BatchDim::kN;
}

BatchDim batchDimOf(const RankOps& a, const RankOps& b) { return batchDimOf(a.gemms, b.gemms); }

namespace {

// What a rank's deep window records allow: compared run to run (batch mode compares rows), and
// only when both runs have them.
void deepWarnings(RankDiff& rd, bool batch, int64_t launches_a, int64_t launches_b,
                  std::vector<std::string>& warnings) {
  if (batch) {
    if (launches_a + launches_b > 0) {
      warnings.push_back(fmt::format(
          "rank {}: deep window records are compared run to run only; batch-size mode compares "
          "the request's rows",
          rd.rank));
    }
    return;
  }
  if (rd.deep && (rd.deep->launches_a == 0 || rd.deep->launches_b == 0)) {
    warnings.push_back(fmt::format(
        "rank {}: only run {} has deep window records; record both runs with the same --deep "
        "window to compare launches",
        rd.rank, rd.deep->launches_a > 0 ? "A" : "B"));
    rd.deep.reset();
  }
}

// The warnings a rank's alignment deserves. None where one run's trace only ends early
// (RankDiff::ends_early): the ops missing from its end are why so few align.
void alignmentWarnings(const RankDiff& rd, std::vector<std::string>& warnings) {
  if (rd.ends_early != 0) return;
  int64_t most = std::max(rd.anchors_a, rd.anchors_b);
  if (most >= 4 && rd.anchors_matched * 2 < most) {
    warnings.push_back(fmt::format(
        "rank {}: only {} of {} library ops (GEMMs, collectives) align: these look like runs of "
        "different programs or inputs, so the verdict below is weak",
        rd.rank, rd.anchors_matched, most));
  }
  if (!rd.exact_alignment) {
    warnings.push_back(fmt::format(
        "rank {}: the runs differ too much to align exactly; parts were paired by position",
        rd.rank));
  }
  if (rd.forced_windows > 0) {
    warnings.push_back(fmt::format(
        "rank {}: in {} place(s) the runs did not fall back into step within the diff's window "
        "({} events); those stretches were aligned on their own and may pair events differently "
        "from an alignment of the whole run",
        rd.rank, rd.forced_windows, rd.peak_window));
  }
}

// The rank where divergence began: the earliest divergence in causal order (fewest collectives
// before it); on a tie, one that is not merely propagated, then the lowest rank. Among ties, a
// divergence that arrived through a collective came from another rank.
std::optional<int32_t> originOf(const std::vector<RankDiff>& ranks,
                                const std::vector<RankScratch>& scratch) {
  const RankDiff* best = nullptr;
  std::tuple<int64_t, int, int32_t> best_key;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankDiff& rd = ranks[r];
    if (!rd.first) continue;
    bool propagated = rd.first->status == PairStatus::kPropagated;
    bool via_collective = propagated && scratch[r].first_is_collective;
    int rank_class = via_collective ? 2 : propagated ? 1 : 0;
    auto key = std::make_tuple(rd.first->collectives_before, rank_class, rd.rank);
    if (best == nullptr || key < best_key) {
      best = &rd;
      best_key = key;
    }
  }
  return best ? std::optional<int32_t>(best->rank) : std::nullopt;
}

// Batch-size mode, decided on the first rank compared: from the runs' first GEMMs, or as asked.
Result<KeyOptions> keyOptions(db::TraceReader& ra, db::TraceReader& rb, const DiffOptions& options,
                              bool& batch_mode) {
  DETRACE_ASSIGN_OR_RETURN(auto gemms_a, loadFirstGemms(ra, kBatchDimGemms));
  DETRACE_ASSIGN_OR_RETURN(auto gemms_b, loadFirstGemms(rb, kBatchDimGemms));
  BatchDim batch_dim = batchDimOf(gemms_a, gemms_b);
  batch_mode = options.batch.value_or(batch_dim != BatchDim::kNone);
  auto unrecorded = [](const std::vector<GemmInfo>& gemms) {
    return std::any_of(gemms.begin(), gemms.end(), [](const GemmInfo& g) { return g.epilogue < 0; });
  };
  const bool epilogues = !unrecorded(gemms_a) && !unrecorded(gemms_b);
  if (!batch_mode) return KeyOptions{.epilogues = epilogues};
  if (batch_dim == BatchDim::kNone) batch_dim = BatchDim::kM;  // forced on
  // Keys that leave out the token dimension, and the rows.
  return KeyOptions{.batch_dim = batch_dim, .rows = true, .epilogues = epilogues};
}

// What diffRuns gathers over the ranks before it joins them.
struct Gathered {
  std::vector<RankScratch> scratch;
  SelectionTable table;
  std::map<ChoiceKey, CollectiveChoiceChange> choices;
  bool fingerprinted_a = false, fingerprinted_b = false;
};

// Runs fingerprinted under different --row-digests cannot be compared: a GEMM's A operand has its
// whole digest hashed from its row digests under one and from its bytes under the other, so every
// A would differ. (Traces from before the option have no value: they fingerprinted every row.)
Status sameRowDigests(const db::TraceReader& a, const db::TraceReader& b, int32_t rank) {
  auto rows = [](const db::TraceReader& r) {
    std::string v = r.metaValue("row_digests");
    return v.empty() ? std::string("all") : v;
  };
  const bool fingerprinted = a.metaValue("capture") != "meta" && b.metaValue("capture") != "meta";
  const std::string rows_a = rows(a), rows_b = rows(b);
  if (!fingerprinted || rows_a == rows_b) return Status::ok();
  return makeError(ErrorCode::kInvalidArgument,
                   "rank {}: run A was recorded with --row-digests {} and run B with --row-digests "
                   "{}; a GEMM's A operand is fingerprinted differently under each (from its row "
                   "digests, or from its bytes alone), so the runs' digests cannot be compared. "
                   "Record both runs with the same --row-digests",
                   rank, rows_a, rows_b);
}

// Runs recorded with different --graph-weights-every can be compared (a weight's digest is the
// same whoever takes it), but a weight that changed is seen at different replays in each: say so.
void graphWeightsWarning(const db::TraceReader& a, const db::TraceReader& b, int32_t rank,
                         std::vector<std::string>& warnings) {
  auto every = [](const db::TraceReader& r) {
    std::string v = r.metaValue("graph_weights_every");
    return v.empty() ? std::string("1") : v;
  };
  const std::string every_a = every(a), every_b = every(b);
  if (every_a == every_b) return;
  warnings.push_back(fmt::format(
      "rank {}: run A digested CUDA graph replays' GEMM weights every {} replay(s) and run B every "
      "{} (--graph-weights-every); between their sampled replays a run's weight digests are the "
      "last ones it took, so a weight that changed may show at different replays in each",
      rank, every_a, every_b));
}

// A rank whose recorder could not follow some NCCL communicators (split or shrunk from a
// non-blocking one, the handle moved before its first call): their calls carry no communicator id, so what their collectives carried from
// one rank to another cannot be told.
void unfollowedCommsWarning(db::TraceReader& a, db::TraceReader& b, int32_t rank,
                            std::vector<std::string>& warnings) {
  for (auto [reader, label] : {std::pair{&a, 'A'}, std::pair{&b, 'B'}}) {
    auto stats = reader->stats();
    if (!stats.isOk()) continue;
    auto it = stats->find("nccl_comms_unfollowed");
    if (it == stats->end() || it->second <= 0) continue;
    warnings.push_back(fmt::format(
        "rank {}: run {} has {} NCCL communicator(s) the recorder could not follow (split or shrunk "
        "from a non-blocking communicator): their calls have no communicator id, so whether one of "
        "their collectives carried another rank's divergence or diverged by itself is not certain",
        rank, label, it->second));
  }
}

// A rank whose trace in one run was not finished: say so, and where the other run's events after
// the end of that trace are all that differs, name that as the divergence's cause.
void unfinishedRank(const db::TraceReader& a, const db::TraceReader& b, RankDiff& rd,
                    std::vector<std::string>& warnings) {
  for (auto [reader, label] : {std::pair{&a, 'A'}, std::pair{&b, 'B'}}) {
    if (reader->finished()) continue;
    warnings.push_back(fmt::format(
        "rank {}: run {}'s trace was not finished (its process was killed, was still running, or "
        "stopped recording on a write error such as a full disk): it may end early",
        rd.rank, label));
  }
  if (!rd.first) return;
  const PairDiff& f = *rd.first;
  const bool b_ends = !b.finished() && f.b < 0 && f.a >= 0 && rd.differingEvents() == rd.events_a - f.a;
  const bool a_ends = !a.finished() && f.a < 0 && f.b >= 0 && rd.differingEvents() == rd.events_b - f.b;
  if (!a_ends && !b_ends) return;
  rd.ends_early = a_ends ? 'A' : 'B';
  rd.why = fmt::format(
      "run {}'s trace ends here: it was not finished (see detrace info), and every event of run {} "
      "from here on is absent from it; the runs agree up to its end",
      rd.ends_early, a_ends ? 'B' : 'A');
}

// Diffs one rank present in both runs into `out`.
Status diffOneRank(const db::Run& run_a, const db::Run& run_b, int32_t rank,
                   const DiffOptions& options, std::optional<KeyOptions>& keys, RunDiff& out,
                   Gathered& g) {
  DETRACE_ASSIGN_OR_RETURN(auto ra, run_a.openRank(rank));
  DETRACE_ASSIGN_OR_RETURN(auto rb, run_b.openRank(rank));
  DETRACE_RETURN_IF_ERROR(sameRowDigests(*ra, *rb, rank));
  graphWeightsWarning(*ra, *rb, rank, out.warnings);
  unfollowedCommsWarning(*ra, *rb, rank, out.warnings);
  if (!keys) {
    DETRACE_ASSIGN_OR_RETURN(keys, keyOptions(*ra, *rb, options, out.batch_mode));
  }
  DETRACE_ASSIGN_OR_RETURN(RankLoader a, RankLoader::open(*ra, rank, *keys));
  DETRACE_ASSIGN_OR_RETURN(RankLoader b, RankLoader::open(*rb, rank, *keys));
  RankScratch scratch;
  DETRACE_ASSIGN_OR_RETURN(
      RankDiff rd, diffRankWindows(a, b, *ra, *rb, out.batch_mode, options, g.table, scratch));
  deepWarnings(rd, out.batch_mode, deepLaunchCount(a.ops()), deepLaunchCount(b.ops()),
               out.warnings);
  unfinishedRank(*ra, *rb, rd, out.warnings);
  g.fingerprinted_a |= a.ops().fingerprinted;
  g.fingerprinted_b |= b.ops().fingerprinted;
  for (const CollectiveChoiceChange& c : rd.collective_choices) {
    auto [it, fresh] = g.choices.try_emplace(choiceKey(c), c);
    if (!fresh) mergeChoice(it->second, c);
  }
  g.scratch.push_back(std::move(scratch));
  out.ranks.push_back(std::move(rd));
  return Status::ok();
}

// Joins the ranks: propagation across them, warnings, the tables and the origin.
void join(Gathered& g, RunDiff& out) {
  propagateAcrossRanks(out.ranks, g.scratch);
  for (auto [fingerprinted, label] :
       {std::pair{g.fingerprinted_a, "A"}, std::pair{g.fingerprinted_b, "B"}}) {
    if (!out.ranks.empty() && !fingerprinted) {
      out.unfingerprinted = true;
      out.warnings.push_back(fmt::format(
          "run {} has no fingerprints: only kernel-selection and schedule differences can be "
          "found; record with fingerprints to find nondeterministic and batch-variant ops",
          label));
    }
  }
  for (const RankDiff& rd : out.ranks) alignmentWarnings(rd, out.warnings);
  for (const auto& [key, count] : g.table) {
    out.selection_changes.push_back(
        {static_cast<db::EventKind>(std::get<0>(key)), std::get<1>(key), std::get<2>(key), count});
  }
  for (auto& [key, c] : g.choices) out.collective_choice_changes.push_back(std::move(c));
  out.origin_rank = originOf(out.ranks, g.scratch);
}

}  // namespace

Result<RunDiff> diffRuns(const db::Run& run_a, const db::Run& run_b, const DiffOptions& options) {
  for (const db::Run* run : {&run_a, &run_b}) {
    if (!run->noGpuWork()) continue;
    return makeError(ErrorCode::kNoData,
                     "{} holds no GPU work: no process of its command made a CUDA, NCCL or cuBLAS "
                     "call that detrace records (its {} trace file(s) have no events), so there is "
                     "nothing to compare; check that the command runs its GPU work, in a process "
                     "that `detrace record` started, and record it again",
                     run->path(), run->idleFiles().size() + run->ranks().size());
  }
  RunDiff out;
  std::error_code ec;
  if (std::filesystem::equivalent(run_a.path(), run_b.path(), ec) && !ec) {
    out.warnings.push_back(fmt::format(
        "{} and {} are the same run: a run always matches itself; diff two recordings", run_a.path(),
        run_b.path()));
  }
  // What opening each run found (a file left out, a damaged manifest, ranks inferred).
  for (const std::string& w : run_a.warnings()) out.warnings.push_back("run A: " + w);
  for (const std::string& w : run_b.warnings()) out.warnings.push_back("run B: " + w);
  const std::optional<int32_t> only = options.rank;
  if (run_a.worldSize() != run_b.worldSize()) {
    out.warnings.push_back(
        fmt::format("the runs have different world sizes ({} and {}): only "
                    "ranks present in both are compared",
                    run_a.worldSize(), run_b.worldSize()));
  }
  std::optional<KeyOptions> keys;  // decided on the first rank
  Gathered g;
  for (const db::RankFile& rf : run_a.ranks()) {
    if (only && rf.rank != *only) continue;
    if (run_b.findRank(rf.rank) == nullptr) {
      out.warnings.push_back(fmt::format("rank {} is missing from run B", rf.rank));
      continue;
    }
    DETRACE_RETURN_IF_ERROR(diffOneRank(run_a, run_b, rf.rank, options, keys, out, g));
  }
  for (const db::RankFile& rf : run_b.ranks()) {
    if ((!only || rf.rank == *only) && run_a.findRank(rf.rank) == nullptr) {
      out.warnings.push_back(fmt::format("rank {} is missing from run A", rf.rank));
    }
  }
  if (only && out.ranks.empty()) {
    return makeError(ErrorCode::kNotFound, "rank {} is not in both runs", *only);
  }
  const int32_t world = std::max(run_a.worldSize(), run_b.worldSize());
  for (int32_t r = 0; r < world; ++r) {
    if (only && r != *only) continue;
    if (run_a.findRank(r) == nullptr || run_b.findRank(r) == nullptr) out.uncompared_ranks.push_back(r);
  }
  join(g, out);
  return out;
}

Result<RunGroups> groupRuns(const std::vector<db::Run>& runs, const DiffOptions& options) {
  std::vector<std::vector<size_t>> classes;
  for (size_t i = 0; i < runs.size(); ++i) {
    bool placed = false;
    for (auto& c : classes) {
      DETRACE_ASSIGN_OR_RETURN(RunDiff d, diffRuns(runs[c.front()], runs[i], options));
      if (d.identical() && d.complete()) {  // a run missing a rank is not shown to behave alike
        c.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) classes.push_back({i});
  }
  std::stable_sort(classes.begin(), classes.end(),
                   [](const auto& x, const auto& y) { return x.size() > y.size(); });
  RunGroups groups;
  groups.classes = std::move(classes);
  for (size_t k = 1; k < groups.classes.size(); ++k) {
    DETRACE_ASSIGN_OR_RETURN(RunDiff d, diffRuns(runs[groups.classes[0].front()],
                                                 runs[groups.classes[k].front()], options));
    groups.explanations.push_back(std::move(d));
  }
  return groups;
}

}  // namespace detrace::replay
