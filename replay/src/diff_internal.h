// The parts of `detrace diff` its files share (diff.h is the interface): diff.cc runs the ranks and
// joins them, rank_differ.cc aligns and classifies one rank a window at a time, diff_classify.cc
// classifies a pair, diff_explain.cc puts ops and verdicts into words, diff_propagate.cc carries
// divergence across ranks through collectives.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "detrace/replay/diff.h"

namespace detrace::replay {

// How far after a library op the kernels it launched are looked for (they follow it closely).
inline constexpr int64_t kChildKernelScan = 64;

// The kernel-selection table of all ranks: (event kind, what ran in A, in B) -> pairs.
using SelectionTable = std::map<std::tuple<int, std::string, std::string>, int64_t>;

// --- diff_classify.cc

// An op's fingerprints, or none (has_inputs and has_outputs false).
const OpExtra& fingerprintsOf(const RankOps& r, const OpRecord& op);
// What the fingerprints say of a pair, whatever ran it; `diverged_before`: something differed
// before it on this rank (blamed when its inputs were not fingerprinted).
PairStatus contentStatus(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                         const OpRecord& ob, bool diverged_before);
// Run to run: a kernel-selection change if what ran differs, else what the fingerprints say.
PairStatus classify(const RankOps& ra, const OpRecord& oa, const RankOps& rb, const OpRecord& ob,
                    bool diverged_before);
// Batch mode: the request's rows of operands in the same slot on both sides compared; nothing if
// either side lacks row digests of its inputs or outputs.
std::optional<PairStatus> rowsStatus(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                                     const OpRecord& ob);
// Batch mode, a library op: its rows if both sides have them, else what ran it.
PairStatus classifyBatch(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                         const OpRecord& ob);

// The identity of a row of the NCCL choice table, as a sortable key.
using ChoiceKey = std::tuple<int, int, int64_t, int64_t, std::string, std::string, int32_t,
                             std::string, std::string, int32_t>;
ChoiceKey choiceKey(const CollectiveChoiceChange& c);
// Adds `from`'s calls to `into` (the same row of the table).
void mergeChoice(CollectiveChoiceChange& into, const CollectiveChoiceChange& from);

// --- diff_explain.cc

std::string propagatedText();
std::string gemmChoiceText(const GemmInfo& g);
std::string collectiveChoiceText(const RankOps& r, const db::Collective& c);
// What ran the op: kernel name, GEMM algorithm or NCCL algorithm/protocol/channels.
std::string choiceText(const RankOps& r, const OpRecord& op);
// Fills rd's description of its first divergence (first_a, first_b, why, entered_after, position,
// landmark) from the windows holding it and kChildKernelScan events after it. `deep`: what the
// rank's deep window comparison found up to there, or nullptr.
void describeFirst(const RankOps& a, const RankOps& b, const DeepDiff* deep, RankDiff& rd);

// --- diff_propagate.cc

// A collective across ranks: (communicator, its sequence number there). A send or receive is
// numbered per peer and direction (the n-th send from rank S to rank R is R's n-th receive from
// S): its first member is then the communicator's id mixed with S and R, the same on both sides.
using CollectiveId = std::pair<int64_t, int64_t>;
CollectiveId collectiveIdOf(const db::Collective& c);

// Collectives as runs of consecutive sequence numbers of one communicator, in the order added: a
// rank's differing collectives of one status are mostly one run per communicator, however long the
// run. Adding an id twice adds it twice.
class CollectiveRuns {
 public:
  struct Run {
    int64_t comm, first, last;
  };
  void add(const CollectiveId& id);
  const std::vector<Run>& runs() const { return runs_; }

 private:
  std::vector<Run> runs_;
  std::map<int64_t, size_t> last_;  // by communicator: its run that `add` may extend
};

// What diffRuns keeps of a rank for propagation across ranks: its differing collectives (run A's
// side) that are propagated and that are nondeterministic, and where those are among its rows.
struct RankScratch {
  CollectiveRuns propagated, nondeterministic;
  std::vector<std::pair<size_t, CollectiveId>> nondeterministic_rows;  // index into differing
  bool first_is_collective = false;
  std::optional<CollectiveId> first_id;  // the first divergence's, if it is one of A's collectives
};

// A collective whose local inputs matched can still differ because another rank's inputs did:
// nondeterministic collectives that some rank saw as propagated become propagated.
void propagateAcrossRanks(std::vector<RankDiff>& ranks, const std::vector<RankScratch>& scratch);

// --- rank_differ.cc

// Aligns and classifies one rank of two runs, reading both a window at a time (diff.h). Adds its
// kernel-selection changes to `table` and what propagation needs to `scratch`.
Result<RankDiff> diffRankWindows(RankLoader& a, RankLoader& b, db::TraceReader& ra,
                                 db::TraceReader& rb, bool batch, const DiffOptions& options,
                                 SelectionTable& table, RankScratch& scratch);

}  // namespace detrace::replay
