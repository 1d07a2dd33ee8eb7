// See bisect_deep.h.
#include "bisect_deep.h"

#include <cctype>

#include <fmt/format.h>

#include "detrace/replay/diff_report.h"

namespace detrace::replay::detail {
namespace {

bool is(const BisectResult& r, PairStatus status) {
  return r.classification == pairStatusName(status);
}

// Launches (kernels, copies, sets: what a launches window counts) recorded before event `seq` of
// `rank`: with every launch recorded, how many the recorder admits before it.
Result<int64_t> launchesBefore(const db::Run& run, int32_t rank, int64_t seq) {
  DETRACE_ASSIGN_OR_RETURN(auto reader, run.openRank(rank));
  DETRACE_ASSIGN_OR_RETURN(db::EventCursor cursor, reader->events(0, seq));
  int64_t n = 0;
  for (;;) {
    DETRACE_ASSIGN_OR_RETURN(bool more, cursor.next());
    if (!more) return n;
    db::EventKind k = cursor.event().kind;
    n += k == db::EventKind::kKernel || k == db::EventKind::kMemcpy || k == db::EventKind::kMemset;
  }
}

Result<std::string> stretchWindow(const BisectResult& r, const db::Run& digest_a) {
  DETRACE_ASSIGN_OR_RETURN(int64_t last, libraryOpIndex(digest_a, r.rank, r.seq_a));
  if (*r.entered_after >= 0) {
    DETRACE_ASSIGN_OR_RETURN(int64_t first, libraryOpIndex(digest_a, r.rank, *r.entered_after));
    return fmt::format("ops:{}:{}", first, last);
  }
  // An ops window starts after some op's call; before the first one, count launches instead.
  DETRACE_ASSIGN_OR_RETURN(int64_t launches, launchesBefore(digest_a, r.rank, r.seq_a));
  if (launches == 0) return makeError(ErrorCode::kNotFound, "nothing was launched before the op");
  return fmt::format("launches:0:{}", launches);
}

std::string deepRunsVerdict(const BisectDeep& d, int32_t rank) {
  if (!d.diverged) {
    return "The two deep recordings did not diverge: the nondeterminism did not show this time, or "
           "it came from memory fresh from the allocator (deep mode zero-fills new allocations, so "
           "a program that reads memory it never wrote stops diverging). Run bisect again; if deep "
           "runs never diverge, look for reads of uninitialized memory.";
  }
  if (!d.diff) {
    return fmt::format(
        "The deep recordings hold no deep launches on rank {}: the window {} held no "
        "kernel launch, or the recorder did not honour --deep (see deep-a.log).",
        rank, d.window);
  }
  return deepVerdictText(*d.diff, "deep-a", "deep-b");
}

const DeepNamed* namedOrigin(const BisectResult& r) {
  if (!r.deep || !r.deep->diff || r.deep->diff->before_window) return nullptr;
  return r.deep->diff->origin ? &*r.deep->diff->origin : nullptr;
}

}  // namespace

Result<DeepPlan> planDeepStep(const BisectOptions& o, const BisectResult& r,
                              const db::Run& digest_a) {
  if (!r.diverged || r.seq_a < 0) return DeepPlan{};
  if (is(r, PairStatus::kNondeterministic) && libraryOpIndex(digest_a, r.rank, r.seq_a).isOk()) {
    return DeepPlan{"",
                    "not needed: the library op itself is where divergence begins (its inputs "
                    "matched, its outputs differ)"};
  }
  if (!is(r, PairStatus::kPropagated)) return DeepPlan{};
  if (!o.command_b.empty()) {
    return DeepPlan{"",
                    "skipped: it compares memory run to run, and the two commands of a pair "
                    "(CMD_A :: CMD_B) compute different shapes, so their launches' memory "
                    "cannot match"};
  }
  if (!o.deep) return DeepPlan{"", "skipped (--no-deep)"};
  if (!r.entered_after) {
    return DeepPlan{"",
                    "skipped: divergence reached this rank through a collective, not through "
                    "its own raw kernels"};
  }
  DETRACE_ASSIGN_OR_RETURN(std::string window, stretchWindow(r, digest_a));
  return DeepPlan{window, ""};
}

void readDeepDiff(const RunDiff& diff, int32_t rank, BisectDeep& deep) {
  deep.diverged = !diff.identical();
  for (const RankDiff& rd : diff.ranks) {
    if (rd.rank == rank) deep.diff = rd.deep;
  }
  deep.verdict = deepRunsVerdict(deep, rank);
}

std::string deepOutcome(const BisectDeep& d) {
  if (!d.diverged) return "the deep runs are identical";
  if (!d.diff) return "no deep launches on the suspect's rank";
  if (d.diff->before_window) return "divergence began before the window";
  if (const auto& o = d.diff->origin) {
    return fmt::format("origin: kernel {} (event {} / {}), {} changed", o->kernel, o->a, o->b,
                       fmt::join(o->differingArgs(), "; "));
  }
  return fmt::format("no origin among {} launch pair(s)", d.diff->compared);
}

std::string propagatedVerdict(const BisectResult& r) {
  int64_t after = r.entered_after.value_or(-1);
  if (r.deep && r.deep->skipped.empty() && !r.deep->window.empty()) {
    std::string found = r.deep->verdict;
    if (!found.empty())
      found[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(found[0])));
    return fmt::format(
        " Its inputs already differed, so the op itself is not the origin: divergence "
        "entered through the raw kernels after event {}. Recorded twice more in deep "
        "mode (--deep {}): {}",
        after, r.deep->window, found);
  }
  std::string v = fmt::format(
      " {}. Its inputs already differed, so the op itself is not the origin: the kernels after "
      "event {} are, and they have no fingerprints, so replay cannot convict one. Look at them "
      "with "
      "detrace export, or narrow with --window and more NVTX ranges.",
      r.why, after);
  if (r.deep && !r.deep->skipped.empty()) v += " Deep window: " + r.deep->skipped + ".";
  return v;
}

void addDeepJson(const BisectResult& r, nlohmann::json& j) {
  if (!r.deep) return;
  const BisectDeep& d = *r.deep;
  j["deep"] = {{"window", d.window},
               {"skipped", d.skipped},
               {"diverged", d.diverged},
               {"verdict", d.verdict}};
  if (d.diff) j["deep"]["diff"] = deepDiffJson(*d.diff);
  const DeepNamed* o = namedOrigin(r);
  if (o == nullptr) return;
  j["origin_kernel"] = o->kernel;
  j["origin_args"] = o->differingArgs();
  j["origin_seq_a"] = o->a;
  j["origin_seq_b"] = o->b;
  j["origin_window_index"] = o->index;
  nlohmann::json bytes = nlohmann::json::array();
  for (const DeepMemory& m : o->memory) {
    if (m.differs) bytes.push_back(m.bytes);
  }
  j["origin_bytes"] = bytes;
}

}  // namespace detrace::replay::detail
