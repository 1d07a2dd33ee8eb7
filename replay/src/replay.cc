// Running a replay: load the op, run each selected implementation `repeat` times, hash every
// output with the digest's CPU twin, and measure the first output against the recorded one and
// the fp64 reference; for a batch-size pair, compare the request's rows across the two shapes.
#include "detrace/replay/replay.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#if DETRACE_REPLAY_HAVE_KERNELS
#include "replay_internal.h"
#endif

namespace detrace::replay {

std::vector<std::string> ReplayResult::reproducing() const {
  std::vector<std::string> names;
  for (const auto& i : impls) {
    if (i.ran() && i.matches_recorded && *i.matches_recorded == i.runs) names.push_back(i.name);
  }
  return names;
}

bool replayAvailable() {
#if DETRACE_REPLAY_HAVE_KERNELS
  return true;
#else
  return false;
#endif
}

#if DETRACE_REPLAY_HAVE_KERNELS
namespace {

using detail::Bytes;
using detail::Impl;
using detail::LoadedOp;

struct Replayed {
  ReplayResult result;
  std::vector<Bytes> first;  // each implementation's first output (empty if it did not run)
};

// Selects implementations; an --impl name that selects nothing is an error listing the names.
Result<std::vector<Impl>> selectImpls(std::vector<Impl> all, const std::vector<std::string>& tokens) {
  std::string names;  // before the chosen ones are moved out
  for (const auto& i : all) names += (names.empty() ? "" : ", ") + i.name;
  std::vector<Impl> chosen;
  for (auto& impl : all) {
    if (detail::implSelected(tokens, impl)) chosen.push_back(std::move(impl));
  }
  for (const std::string& t : tokens) {
    const bool used = std::any_of(chosen.begin(), chosen.end(), [&](const Impl& i) {
      return detail::implSelected({t}, i);
    });
    if (!used) {
      return makeError(ErrorCode::kInvalidArgument,
                       "--impl {}: no such implementation for this op (it has: {}; groups: cpu, "
                       "gpu, controls; '*' globs)",
                       t, names);
    }
  }
  return chosen;
}

int runsOf(const Impl& impl, int repeat) { return impl.skipped.empty() ? (impl.once ? 1 : repeat) : 0; }

// Runs one implementation; `done` counts finished runs for the progress callback.
ImplResult runImpl(const Impl& impl, const LoadedOp& op, const std::vector<double>& reference,
                   const ReplayOptions& options, int& done, int total, Bytes& first) {
  ImplResult r;
  r.name = impl.name;
  r.description = impl.description;
  r.gpu = impl.gpu;
  r.control = impl.control;
  r.skipped = impl.skipped;
  if (!r.skipped.empty()) return r;
  const int runs = runsOf(impl, options.repeat);
  std::set<uint64_t> digests;
  int matches = 0;
  const int64_t row_bytes = op.header.output.cols * db::dtypeSize(op.header.output.dtype);
  for (int k = 0; k < runs; ++k) {
    if (options.progress) options.progress(done, total, impl.name);
    Result<Bytes> out = impl.run();
    ++done;
    if (!out.isOk()) {
      if (k == 0 && out.status().code() == ErrorCode::kUnavailable) {
        r.skipped = out.status().message();
      } else {
        r.error = out.status().message();
      }
      done += runs - k - 1;
      break;
    }
    if (static_cast<int64_t>(out->size()) != op.header.output.bytes()) {
      r.error = fmt::format("produced {} bytes, expected {}", out->size(), op.header.output.bytes());
      break;
    }
    const uint64_t digest = detail::digestOf(*out);
    digests.insert(digest);
    if (op.recorded_bytes) {
      matches += *out == *op.recorded_bytes ? 1 : 0;
    } else if (op.recorded_digest) {
      matches += digest == *op.recorded_digest ? 1 : 0;
    } else if (!op.recorded_row_digests.empty()) {
      matches += detail::rowDigestsOf(*out, op.header.output.rows, row_bytes) ==
                         op.recorded_row_digests
                     ? 1
                     : 0;
    }
    if (k == 0) {
      r.digest = digest;
      first = std::move(*out);
    }
    ++r.runs;
  }
  r.distinct = static_cast<int>(digests.size());
  if (r.runs == 0 || !r.error.empty()) return r;
  if (op.recorded_bytes || op.recorded_digest || !op.recorded_row_digests.empty()) {
    r.matches_recorded = matches;
  }
  if (op.recorded_bytes) r.to_recorded = compareOutputs(op.header.output, first, *op.recorded_bytes);
  r.to_reference = compareToExact(op.header.output, first, reference);
  return r;
}

Result<Replayed> replayLoaded(const LoadedOp& op, const ReplayOptions& options, int& done,
                              int total_hint) {
  auto reference = std::make_shared<const std::vector<double>>(detail::referenceOf(op));
  DETRACE_ASSIGN_OR_RETURN(std::vector<Impl> impls,
                           selectImpls(detail::implsFor(op, reference, options.allow_gpu),
                                       options.impls));
  int total = total_hint;
  if (total == 0) {
    for (const auto& i : impls) total += runsOf(i, options.repeat);
  }
  Replayed out;
  out.result = op.header;
  for (const Impl& impl : impls) {
    Bytes first;
    out.result.impls.push_back(runImpl(impl, op, *reference, options, done, total, first));
    out.first.push_back(std::move(first));
  }
  if (options.progress) options.progress(done, total, "");
  return out;
}

int totalRuns(const LoadedOp& op, const ReplayOptions& options) {
  auto reference = std::make_shared<const std::vector<double>>();
  auto impls = selectImpls(detail::implsFor(op, reference, options.allow_gpu), options.impls);
  int total = 0;
  if (impls.isOk()) {
    for (const auto& i : *impls) total += runsOf(i, options.repeat);
  }
  return total;
}

Status checkOptions(const ReplayOptions& options) {
  if (options.repeat < 1) {
    return makeError(ErrorCode::kInvalidArgument, "--repeat must be at least 1 (got {})",
                     options.repeat);
  }
  return Status::ok();
}

// The request's rows: each row of `small` found in `large` by the digest of its inputs.
Result<std::vector<std::pair<int64_t, int64_t>>> matchRows(const LoadedOp& small,
                                                           const LoadedOp& large) {
  std::unordered_map<uint64_t, std::vector<int64_t>> where;
  for (size_t j = 0; j < large.input_row_keys.size(); ++j) {
    where[large.input_row_keys[j]].push_back(static_cast<int64_t>(j));
  }
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t missing = 0;
  for (size_t i = 0; i < small.input_row_keys.size(); ++i) {
    auto it = where.find(small.input_row_keys[i]);
    if (it == where.end() || it->second.empty()) {
      ++missing;
      continue;
    }
    rows.emplace_back(static_cast<int64_t>(i), it->second.front());
    it->second.erase(it->second.begin());
  }
  if (missing > 0 || rows.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "{} of the {} input rows of the smaller op do not occur in the larger one's "
                     "inputs: the two events are not the same request at two batch sizes",
                     missing, small.input_row_keys.size());
  }
  return rows;
}

Status checkPairable(const LoadedOp& a, const LoadedOp& b) {
  if (a.header.kind != b.header.kind) {
    return makeError(ErrorCode::kInvalidArgument, "--pair needs two ops of one kind: {} vs {}",
                     a.header.op, b.header.op);
  }
  if (a.header.output.cols != b.header.output.cols || a.header.output.dtype != b.header.output.dtype) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--pair needs the same op at two batch sizes; the rows differ in width or "
                     "type ({} vs {})",
                     a.header.op, b.header.op);
  }
  if (a.gemm && (a.gemm->k != b.gemm->k || a.shared_input_key != b.shared_input_key)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--pair: the two GEMMs' weights (the operand shared by all tokens) differ, so "
                     "they are not the same op at two batch sizes ({} vs {})",
                     a.header.op, b.header.op);
  }
  if (a.collective && a.collective->nranks != b.collective->nranks) {
    return makeError(ErrorCode::kInvalidArgument, "--pair: {} vs {} ranks", a.collective->nranks,
                     b.collective->nranks);
  }
  return Status::ok();
}

bool rowsEqual(const Bytes& x, int64_t i, const Bytes& y, int64_t j, int64_t row_bytes) {
  return std::equal(x.begin() + i * row_bytes, x.begin() + (i + 1) * row_bytes,
                    y.begin() + j * row_bytes);
}

}  // namespace

Result<ReplayResult> replayEvent(const db::Run& run, const EventRef& event,
                                 const ReplayOptions& options) {
  DETRACE_RETURN_IF_ERROR(checkOptions(options));
  DETRACE_ASSIGN_OR_RETURN(LoadedOp op, detail::loadOp(run, event));
  int done = 0;
  DETRACE_ASSIGN_OR_RETURN(Replayed r, replayLoaded(op, options, done, 0));
  return std::move(r.result);
}

Result<PairResult> replayPair(const db::Run& run_a, const EventRef& event_a, const db::Run& run_b,
                              const EventRef& event_b, const ReplayOptions& options) {
  DETRACE_RETURN_IF_ERROR(checkOptions(options));
  DETRACE_ASSIGN_OR_RETURN(LoadedOp a, detail::loadOp(run_a, event_a));
  DETRACE_ASSIGN_OR_RETURN(LoadedOp b, detail::loadOp(run_b, event_b));
  DETRACE_RETURN_IF_ERROR(checkPairable(a, b));
  const bool a_small = a.header.output.rows <= b.header.output.rows;
  DETRACE_ASSIGN_OR_RETURN(auto rows, a_small ? matchRows(a, b) : matchRows(b, a));
  if (!a_small) {
    for (auto& [x, y] : rows) std::swap(x, y);
  }
  const int total = totalRuns(a, options) + totalRuns(b, options);
  int done = 0;
  DETRACE_ASSIGN_OR_RETURN(Replayed ra, replayLoaded(a, options, done, total));
  DETRACE_ASSIGN_OR_RETURN(Replayed rb, replayLoaded(b, options, done, total));
  PairResult out;
  out.rows = rows;
  const int64_t row_bytes = a.header.output.cols * db::dtypeSize(a.header.output.dtype);
  if (a.recorded_bytes && b.recorded_bytes) {
    int64_t equal = 0;
    for (auto [i, j] : rows) equal += rowsEqual(*a.recorded_bytes, i, *b.recorded_bytes, j, row_bytes);
    out.recorded_rows_equal = equal;
  } else if (!a.recorded_row_digests.empty() && !b.recorded_row_digests.empty()) {
    int64_t equal = 0;
    for (auto [i, j] : rows) {
      equal += a.recorded_row_digests[static_cast<size_t>(i)] ==
               b.recorded_row_digests[static_cast<size_t>(j)];
    }
    out.recorded_rows_equal = equal;
  }
  for (size_t k = 0; k < ra.result.impls.size(); ++k) {
    const ImplResult& x = ra.result.impls[k];
    PairImplResult p;
    p.name = x.name;
    p.gpu = x.gpu;
    p.control = x.control;
    const ImplResult* y = nullptr;
    size_t yk = 0;
    for (; yk < rb.result.impls.size(); ++yk) {
      if (rb.result.impls[yk].name == x.name) {
        y = &rb.result.impls[yk];
        break;
      }
    }
    if (y == nullptr) {
      p.skipped = "not available for B";
    } else if (!x.ran() || !y->ran()) {
      const ImplResult& bad = !x.ran() ? x : *y;
      p.skipped = !bad.skipped.empty() ? bad.skipped : "failed: " + bad.error;
    } else {
      p.rows = static_cast<int64_t>(rows.size());
      for (auto [i, j] : rows) p.rows_equal += rowsEqual(ra.first[k], i, rb.first[yk], j, row_bytes);
    }
    out.impls.push_back(std::move(p));
  }
  out.a = std::move(ra.result);
  out.b = std::move(rb.result);
  return out;
}

#else  // !DETRACE_REPLAY_HAVE_KERNELS

namespace {
Status unavailable() {
  return makeError(ErrorCode::kUnavailable,
                   "this detrace was built without kernels/ (CUDA 13 was not found at build "
                   "time), and replay runs its implementations; rebuild with CUDA in /usr/local/cuda");
}
}  // namespace

Result<ReplayResult> replayEvent(const db::Run&, const EventRef&, const ReplayOptions&) {
  return unavailable();
}
Result<PairResult> replayPair(const db::Run&, const EventRef&, const db::Run&, const EventRef&,
                              const ReplayOptions&) {
  return unavailable();
}

#endif  // DETRACE_REPLAY_HAVE_KERNELS

}  // namespace detrace::replay
