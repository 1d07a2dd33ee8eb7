// Deep window records (`detrace record --deep WINDOW`) compared across two runs: which kernel
// launch turned identical memory into different memory.
//
// A deep launch is a kernel event with operand rows. Each row pair is one *target*: a device
// allocation the launch's parameters point into. Its name says which parameter words point there
// ("arg0", "arg2+16", "arg0,arg3+8"), role kInput is the digest of the whole allocation just before
// the launch and kOutput just after, both on the launch's stream; the pair shares a slot; bytes is
// the allocation's size and address its base (which differs between runs).
//
// Each aligned pair of deep launches, in run A's order, is one of:
//   origin          every target's pre-launch digest matches (targets matched by slot, args and
//                   size) and some post-launch digest differs: the kernel got identical memory and
//                   produced different memory
//   propagated      some pre-launch digest differs: it read memory that had already diverged
//   clean           every digest matches
//   not comparable  the target lists differ (other args or sizes, as between batch sizes)
// The first origin is where divergence begins. If the first compared launch is already
// propagated, divergence began before the window. The walk reads two launches' operand rows at a
// time, only for pairs whose loaded fingerprints (RankOps) differ, and keeps counts and a few named
// launches: 100k deep launches cost at most 200k indexed lookups and constant memory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/reader.h"
#include "detrace/replay/ops.h"

namespace detrace::replay {

// One device allocation a launch's parameters point into.
struct DeepTarget {
  int32_t slot = 0;
  std::string args;                   // the parameter words pointing into it: "arg2", "arg0,arg3+8"
  int64_t bytes = 0;                  // the allocation's size
  int64_t address = 0;                // its base in this run
  std::optional<uint64_t> pre, post;  // digests of the whole allocation before / after the launch
};

// A launch's deep records, targets in slot order.
struct DeepLaunch {
  int64_t seq = -1;
  std::vector<DeepTarget> targets;
};

// Groups one event's operand rows (TraceReader::operands) into targets; `ops` names them.
DeepLaunch deepLaunchOf(const RankOps& ops, int64_t seq, const std::vector<db::Operand>& operands);

enum class DeepStatus { kClean = 0, kOrigin, kPropagated, kNotComparable };
const char* deepStatusName(DeepStatus status);

struct DeepVerdict {
  DeepStatus status = DeepStatus::kClean;
  // Indices into the targets: origin, those whose memory differs after the launch; propagated,
  // those that differed before it.
  std::vector<size_t> differing;
};

// Classifies one aligned pair of deep launches (see the top of this file).
DeepVerdict classifyDeep(const DeepLaunch& a, const DeepLaunch& b);

// An allocation a named launch reached, in both runs.
struct DeepMemory {
  std::string args;
  int64_t bytes = 0;
  int64_t address_a = 0, address_b = 0;
  bool differs = false;  // origin: after the launch; propagated: before it
};

// A launch the report names: an origin, or the first that read diverged memory.
struct DeepNamed {
  int64_t a = -1, b = -1;  // seq in each run
  int64_t index = -1;      // its place among run A's deep launches, from 0
  DeepStatus status = DeepStatus::kClean;
  std::string kernel;                 // the kernel name without its parameter list
  std::vector<DeepMemory> memory;     // every target, in slot order
  std::vector<std::string> position;  // NVTX ranges open around it in A, outermost first
  std::string landmark;               // "kernel after GEMM 6 of 40"

  // The args of the targets that differ (origin: after; propagated: before).
  std::vector<std::string> differingArgs() const;
};

struct DeepDiff {
  std::string window;  // the recording's `deep_window` meta (run A's), "" if unknown
  int64_t launches_a = 0, launches_b = 0;  // deep launches of the rank in each run
  int64_t compared = 0;                    // aligned pairs with deep records on both sides
  int64_t unpaired = 0;                    // deep launches of A without a deep partner in B
  std::map<DeepStatus, int64_t> counts;    // compared pairs per status
  bool before_window = false;              // the first compared launch already read diverged memory
  std::optional<DeepNamed> origin;         // the first origin: where divergence begins
  std::vector<DeepNamed> other_origins;    // the next ones (at most kMaxOtherOrigins)
  std::optional<DeepNamed> first_propagated;  // the first launch that read diverged memory

  static constexpr size_t kMaxOtherOrigins = 8;
  int64_t count(DeepStatus s) const;
};

// Counts the deep launches of a rank (kernel events with operand rows), as its loader read them.
int64_t deepLaunchCount(const RankOps& ops);

// Compares the deep launches of one rank of two runs as the diff walks its alignment; `ra` and
// `rb` are those runs' readers (for the operand rows).
class DeepComparer {
 public:
  DeepComparer(db::TraceReader& ra, db::TraceReader& rb);
  // The next event of A in sequence order (`a`'s window holds it), with the event of B aligned
  // with it, or -1: a deep launch is compared with its partner, or counted unpaired.
  Status visit(const RankOps& a, const RankOps& b, int64_t seq, int64_t seq_b);
  // What the walk found so far.
  const DeepDiff& current() const { return out_; }
  // At the end: nullopt when neither run has deep launches.
  std::optional<DeepDiff> finish(const RankOps& a, const RankOps& b);

 private:
  static bool knownClean(const OpExtra& x, const OpExtra& y);
  void note(const RankOps& a, const DeepLaunch& la, const DeepLaunch& lb, const DeepVerdict& v,
            int64_t index);
  static DeepNamed named(const RankOps& a, const DeepLaunch& la, const DeepLaunch& lb,
                         const DeepVerdict& v, int64_t index);

  db::TraceReader& ra_;
  db::TraceReader& rb_;
  DeepDiff out_;
  int64_t index_ = 0;  // deep launches of A visited
};

// The verdict in one paragraph, naming the runs `a` and `b` ("A", "deep-a", ...): "Divergence
// begins at kernel `k` (event 7 in A / 7 in B, launch 3 of 6 in the deep window): its memory
// before the launch matched in both runs (3 allocations), after it arg2's allocation (8 MiB)
// differs — same inputs, different outputs: the kernel is nondeterministic."
std::string deepVerdictText(const DeepDiff& deep, const std::string& a = "A",
                            const std::string& b = "B");

// "8 MiB", "1.5 KiB", "12 B".
std::string bytesText(int64_t bytes);

}  // namespace detrace::replay
