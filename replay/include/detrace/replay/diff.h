// Comparing two runs: align each rank's events, classify every aligned pair, find where divergence
// begins on each rank and, in causal order across ranks, where it began overall.
//
// Alignment is two-level: library ops (GEMMs, collectives) are the fixed points, aligned by kind and
// shape; the kernels between two aligned library ops are aligned by kernel-name family. Both levels
// use alignSequences(), so nearly identical runs cost about a linear scan.
//
// Classification of an aligned pair, in this order:
//   kernel selection changed  same op and shape, different kernel / cuBLASLt algorithm / NCCL
//                             algorithm, protocol or channels
//   propagated                its inputs already differed (on this rank, or for a collective on
//                             any rank of the communicator)
//   nondeterministic          inputs' fingerprints equal, outputs' fingerprints differ
//   identical                 none of the above (for ops without fingerprints: same op, same choice)
// An event present in one run only is a schedule or shape difference, unless it was moved (below).
//
// Reordered events. Work issued from another thread or stream (NCCL's proxy thread copying its
// connection buffers during the first all-reduce, a side stream's memcpys) lands at a different
// place in a rank's event sequence from run to run, relative to the main thread's events, without
// being a different computation. After alignment, an event left without a partner in A and one
// left without a partner in B that have the same alignment key and lie at most kReorderWindow
// positions apart in the aligned sequence are taken to be the same event, moved: the pair is
// classified like an aligned pair (so fingerprint differences are still found), and if its
// contents match it is `reordered`, which is not a divergence. A kernel that a library op launched
// only pairs with one launched by that op's aligned partner, and markers are never paired. Each
// event is paired with the oldest waiting event of the other side with its key, in one pass that
// holds the last kReorderWindow positions: O(n) time (a hash lookup per unpaired event) and
// O(kReorderWindow) memory.
//
// Batch-size mode (bs=1 vs bs=64: the runs' token counts differ) aligns GEMMs and collectives
// without their token dimension and compares the request's rows instead of whole tensors: it finds
// the smaller run's rows inside the larger run's operands by per-row fingerprints, and calls an op
// batch-variant when its input rows all match but its output rows do not.
//
// Kernels recorded in a deep window (`detrace record --deep`) carry their allocations' digests
// before and after the launch as inputs and outputs, so they are classified like library ops; when
// both runs have them, deep_diff.h names the launch where divergence begins (RankDiff::deep).
//
// Memory. Each rank of each run is read a chunk of events at a time (DiffOptions::chunk_events,
// RankLoader in ops.h) and forgotten once classified: a diff holds a few chunks of each run and
// what the report needs (counts, the first divergence, the tables), whatever the runs' length; with
// the default chunk about 270k events of each run, 59 MiB peak RSS in bench_diff at 1M and at 10M
// events. Library ops are aligned a window at a time (alignWindow in align.h), which gives the
// whole-run alignment wherever the runs fall back into step after each difference within the
// window; where they do not within 16 chunks, that stretch is aligned on its own
// (RankDiff::forced_windows, and a warning). Runs of up to two chunks are aligned in one piece.
// RankDiff::differing, every differing pair, grows with the differences: it is kept only when asked
// (DiffOptions::keep_differing; the viewer pages through it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "detrace/base/status.h"
#include "detrace/db/run.h"
#include "detrace/replay/deep_diff.h"
#include "detrace/replay/ops.h"

namespace detrace::replay {

enum class PairStatus {
  kIdentical = 0,
  kKernelSelection,
  kNondeterministic,
  kPropagated,
  kSchedule,      // present in one run only (different schedule or shapes)
  kBatchVariant,  // batch mode: the request's input rows match, its output rows do not
  kReordered,     // the same event with the same contents, at another place relative to the rest
                  // (another thread's or stream's work): not a divergence
};

// How far apart (in positions of the aligned sequence: pairs, insertions and deletions) an event
// missing from B and one missing from A may lie and still be paired as one moved event. It is a
// bound, not a measured distance: wide enough for work that another thread issues while the main
// thread launches a few layers, narrow enough that the pass stays linear with a small fixed memory
// on 10M-event ranks and that an op which only looks the same (same key) far away, in a different
// schedule, is not taken for a moved one.
inline constexpr int64_t kReorderWindow = 4096;

const char* pairStatusName(PairStatus status);

struct PairDiff {
  int64_t a = -1;  // seq in run A, -1 if absent
  int64_t b = -1;  // seq in run B, -1 if absent
  PairStatus status = PairStatus::kIdentical;
  int64_t collectives_before = 0;  // collectives of run A before this pair: its causal position
  // A moved event (see kReorderWindow): the seq of the same event on the other side. In
  // RankDiff::differing a moved event is two rows, its place in A (b = -1) and its place in B
  // (a = -1), each naming the other here, so that the rows stay in the order of both runs; in
  // RankDiff::first both a and b are set and this is b again.
  int64_t partner = -1;
  bool moved() const { return partner >= 0; }
};

// One row of the NCCL choice table: aligned collectives of one kind and size whose algorithm,
// protocol or channel count differ between the runs, and what happened to their outputs (batch
// mode: the request's rows; run to run: the whole output) in those calls.
struct CollectiveChoiceChange {
  db::CollOp op = db::CollOp::kUnknown;
  db::DType dtype = db::DType::kUnknown;
  int64_t count_a = 0, count_b = 0;              // elements
  std::string algo_a, proto_a, algo_b, proto_b;  // "?" where NCCL did not say
  int32_t channels_a = -1, channels_b = -1;
  int64_t calls = 0;
  // Calls whose outputs matched; differed with the same inputs (batch-variant or nondeterministic);
  // differed because their inputs already did (propagated); or could not be compared (no
  // fingerprints or row digests).
  int64_t unchanged = 0, changed = 0, inputs_differed = 0, unknown = 0;
  std::vector<int32_t> ranks;  // ranks where it was seen, ascending

  // "unchanged" (every call), "changed" (some call, with the same inputs) or "unknown".
  const char* rows() const;
};

struct RankDiff {
  int32_t rank = -1;
  int64_t events_a = 0, events_b = 0;
  std::map<PairStatus, int64_t> counts;  // pairs per status (a moved event counts once)
  // Every non-identical pair (reordered ones included), in the alignment's order, which is the
  // order of both runs; empty unless DiffOptions::keep_differing.
  std::vector<PairDiff> differing;
  int64_t differing_events = 0;  // differingEvents()
  std::optional<PairDiff> first;         // where divergence begins on this rank
  bool exact_alignment = true;
  int64_t anchors_a = 0, anchors_b = 0, anchors_matched = 0;  // library ops, and how many aligned
  int64_t peak_window = 0;  // the most events of one run held at once: the diff's memory follows it
  // Windows aligned as if the runs ended there, because the runs did not fall back into step
  // within the longest lookahead (rank_differ.cc): there the alignment may differ from a
  // whole-run one.
  int64_t forced_windows = 0;
  // Filled by diffRuns: what `first` is on each side, and why it was classified so.
  std::string first_a, first_b, why;
  // When divergence was already in `first`'s inputs: the last event before it whose outputs still
  // matched (-1 = the start); the kernels in between are the suspects.
  std::optional<int64_t> entered_after;
  // Where `first` sits in the program: the NVTX ranges open around it in run A (in B if it is
  // absent from A), outermost first, e.g. {"step 3", "layer 5"}; empty when the trace has no
  // markers. position_b: the same in run B, only when it differs.
  std::vector<std::string> position, position_b;
  // A landmark that needs no markers, from the same side: "GEMM 6 of 40", "kernel after GEMM 6 of
  // 40", "collective 2 of 8".
  std::string landmark;
  // Both runs recorded deep windows (run to run, not batch mode): their launches compared.
  std::optional<DeepDiff> deep;
  // Aligned (or moved) collectives whose NCCL algorithm, protocol or channels differ.
  std::vector<CollectiveChoiceChange> collective_choices;
  // 'A' or 'B' when that run's trace was not finished (db::TraceReader::finished) and simply ends
  // at `first`: every event of the other run from there on is absent from it. The runs then agree
  // up to its end; `why` says so. 0 otherwise.
  char ends_early = 0;

  int64_t count(PairStatus status) const;
  // Moved events whose contents match (counts[kReordered]).
  int64_t reordered() const { return count(PairStatus::kReordered); }
  // The events that differ: the non-identical pairs that are not reordered, a moved event once.
  int64_t differingEvents() const { return differing_events; }
};

// One row of the kernel-selection table: what ran in A and in B for the same op, and how often.
struct SelectionChange {
  db::EventKind kind = db::EventKind::kOther;
  std::string a, b;
  int64_t count = 0;
};

struct RunDiff {
  bool batch_mode = false;
  std::vector<RankDiff> ranks;
  std::optional<int32_t> origin_rank;  // the rank where divergence began, in causal order
  std::vector<SelectionChange> selection_changes;
  // Every rank's collective_choices merged (calls summed, ranks joined), ordered by op, dtype,
  // sizes and choices.
  std::vector<CollectiveChoiceChange> collective_choice_changes;
  std::vector<std::string> warnings;   // ranks missing on one side, inexact alignments, ...
  bool unfingerprinted = false;        // a run has no fingerprints: only choices can differ
  // Ranks of either run's world (the one asked for, with DiffOptions::rank) that were not
  // compared: a rank missing from one run (its file missing or unreadable, or another world size).
  std::vector<int32_t> uncompared_ranks;
  bool identical() const { return !origin_rank.has_value(); }
  bool complete() const { return uncompared_ranks.empty(); }
};

// Events read from a trace at a time (DiffOptions::chunk_events).
inline constexpr int64_t kDiffChunkEvents = 65536;

struct DiffOptions {
  std::optional<int32_t> rank;   // compare only this rank
  std::optional<bool> batch;     // force batch-size mode on/off; unset = detect from GEMM shapes
  // Keep every differing pair in RankDiff::differing (the viewer pages through them). Off, only
  // counts, the first divergence and the tables are kept, and memory stays bounded however many
  // events differ (`detrace diff`).
  bool keep_differing = true;
  // Events read from each trace at a time: the diff holds about two chunks ahead of each run's
  // last aligned event (see the top of this file). Tests make it small.
  int64_t chunk_events = kDiffChunkEvents;
};

// Each rank of two runs is aligned and classified a window at a time (see the top of this file;
// loaded with KeyOptions::batch_dim set in batch mode). In batch mode only library ops (whose rows
// are compared) can be where divergence begins; kernel differences are expected between batch
// sizes and only feed the kernel-selection table. Markers (NVTX ranges) are aligned like kernels
// but never differ: a pair of markers is identical, and a marker present in one run only counts as
// a schedule difference that cannot be `first`. Events present in one run only that are the same
// event moved (see kReorderWindow) are classified as a pair: reordered if their contents match,
// else as their contents say.

// How many of the runs' first GEMMs batchDimOf compares.
inline constexpr size_t kBatchDimGemms = 256;

// The token dimension if the runs look like one program at two batch sizes: their first GEMMs
// have the same k in the same order, and exactly one of m and n differs for some; kNone otherwise.
BatchDim batchDimOf(std::span<const GemmInfo> a, std::span<const GemmInfo> b);
BatchDim batchDimOf(const RankOps& a, const RankOps& b);

// Diffs every rank present in both runs (or only options.rank). Ranks are compared one at a time,
// so memory follows one rank's windows, not the world size or the runs' length.
Result<RunDiff> diffRuns(const db::Run& a, const db::Run& b, const DiffOptions& options = {});

// Many runs: groups them into classes of runs that diff as identical ("3 distinct behaviours over
// 8 runs"), then diffs the first run of the largest class against the first of each other class.
struct RunGroups {
  std::vector<std::vector<size_t>> classes;  // indices into the given runs, largest class first
  std::vector<RunDiff> explanations;         // classes[0][0] vs classes[k][0], for k >= 1
};
Result<RunGroups> groupRuns(const std::vector<db::Run>& runs, const DiffOptions& options = {});

// A kernel name without its parameter list, at most `max` characters (reports).
std::string shortKernelName(const std::string& name, size_t max = 120);

// A human-readable description of one op (kind, name, shapes, choice) of a side.
std::string describeOp(const RankOps& ops, int64_t seq);

}  // namespace detrace::replay
