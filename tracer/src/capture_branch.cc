// A captured GEMM's input digests on a branch of the graph beside its kernels (the design is in
// fingerprinter.h, InputDigestsBeside).
//
// Stream capture makes every node depend on the stream's current dependency set. Here: the set
// before the GEMM's call is kept, the input digests are captured (their nodes depend on it), the
// set is put back, so that the call's kernels depend on what came before the call and not on the
// digests, and after the call the digests' last nodes are added to the set, so that the output's
// digests and everything captured after them wait for both. In the replayed graph the input
// digests (a weight is most of their bytes) then run while the GEMM runs, off the replay's critical
// path; only the output's digest stays on it.
//
// Sound because the inputs cannot change while the GEMM runs: the plan (fingerprintPlan) takes
// this way only for calls that cannot change their inputs, and nothing captured after the call can
// run before the branch is joined. If putting the set back fails, the digests simply stay before
// the call (as with DETRACE_DIAG_DIGEST_AFTER=0); if joining fails, the branch stays out of the
// stream (no error at the capture's end: the driver does not count nodes taken out of the set
// through this API as unjoined) and a later kernel might overwrite an input before its digest
// reads it: counted (graph_gemm_input_digests_unjoined) and logged once.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "fingerprinter.h"
#include "fingerprinter_state.h"
#include "log.h"

namespace detrace::tracer {
namespace {

using fp::Driver;

// DETRACE_DIAG_GRAPH_INPUTS_AFTER=1: a captured GEMM's input digests come after its kernels with
// its output's, in one node on the critical path (as before the branch), to measure the branch.
bool branchAllowed() {
  static const bool on = [] {
    const char* v = std::getenv("DETRACE_DIAG_GRAPH_INPUTS_AFTER");
    return v == nullptr || std::strcmp(v, "1") != 0;
  }();
  return on;
}

// The stream's current capture dependencies; false unless it is being captured and every edge
// into the next node would be a plain one (anything else is left as the program made it).
bool captureDeps(CUstream stream, std::vector<CUgraphNode>& out) {
  const Driver& d = Driver::get();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t n = 0;
  if (d.capture_info == nullptr ||
      d.capture_info(stream, &status, nullptr, nullptr, &deps, &edges, &n) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE || (n > 0 && deps == nullptr)) {
    return false;
  }
  if (edges != nullptr) {
    const CUgraphEdgeData plain{};
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(&edges[i], &plain, sizeof(plain)) != 0) return false;
    }
  }
  out.assign(deps, deps + n);
  return true;
}

bool sameSet(std::vector<CUgraphNode> a, std::vector<CUgraphNode> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

// DETRACE_GRAPH_DEFER_OUTPUTS=1 (experimental): a captured GEMM's output digests may run beside
// the next GEMM's kernels too, when that GEMM is the next thing captured on the stream.
bool deferOutputs() {
  static const bool on = [] {
    const char* v = std::getenv("DETRACE_GRAPH_DEFER_OUTPUTS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// The last captured GEMM's output digests on this thread (deferOutputs): the stream's
// dependencies before and after them, and the bytes they read.
struct HeldOutput {
  CUstream stream = nullptr;
  uint64_t capture = 0;
  std::vector<CUgraphNode> before, after;
  std::vector<std::pair<uint64_t, uint64_t>> reads;  // [begin, end) of each output operand
};
thread_local HeldOutput t_held;

uint64_t captureId(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  const Driver& d = Driver::get();
  if (d.capture_info == nullptr ||
      d.capture_info(stream, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    return 0;
  }
  return id;
}

// Whether the GEMM about to be captured may run beside the previous GEMM's held output digests:
// nothing was captured on the stream since them (its dependencies are still their last nodes) and
// the GEMM writes none of the bytes they read.
bool mayPassHeld(CUstream stream, const std::vector<CUgraphNode>& now,
                 const std::vector<OperandSpec>& specs) {
  const HeldOutput& h = t_held;
  if (h.after.empty() || h.stream != stream || !sameSet(h.after, now) ||
      h.capture != captureId(stream)) {
    return false;
  }
  for (const OperandSpec& s : specs) {
    if (s.role == db::OperandRole::kInput) continue;
    const uint64_t b = s.address, e = s.address + s.bytes;
    for (auto [rb, re] : h.reads) {
      if (b < re && rb < e) return false;
    }
  }
  return true;
}

}  // namespace

bool InputDigestsBeside::open(uint64_t token, CUstream stream,
                              const std::vector<OperandSpec>& specs) noexcept {
  try {
    tail_.clear();
    const Driver& d = Driver::get();
    if (token == 0 || !branchAllowed() || d.update_capture_deps == nullptr) return false;
    std::vector<CUgraphNode> before;
    if (!captureDeps(stream, before)) return false;
    if (deferOutputs() && mayPassHeld(stream, before, specs) &&
        d.update_capture_deps(stream, t_held.before.data(), nullptr, t_held.before.size(),
                              CU_STREAM_SET_CAPTURE_DEPENDENCIES) == CUDA_SUCCESS) {
      // The previous GEMM's output digests join with this GEMM's input digests instead.
      passed_ = std::move(t_held.after);
      before = std::move(t_held.before);
      fp::state().graph_outputs_deferred.fetch_add(1, std::memory_order_relaxed);
    }
    t_held = {};
    fingerprintOperands(token, stream, specs, /*inputs=*/true, nullptr, /*known_uncaptured=*/false);
    std::vector<CUgraphNode> after;
    stream_ = stream;
    if (!captureDeps(stream, after)) return true;  // captured, perhaps; no branch: digests before
    if (sameSet(before, after)) return false;      // nothing captured: the caller digests them
    // The call's kernels depend on what came before it, not on the digests.
    if (d.update_capture_deps(stream, before.data(), nullptr, before.size(),
                              CU_STREAM_SET_CAPTURE_DEPENDENCIES) != CUDA_SUCCESS) {
      return true;  // the digests stay before the call, in stream order: still right
    }
    tail_ = std::move(after);
    fp::state().graph_inputs_beside.fetch_add(1, std::memory_order_relaxed);
    return true;
  } catch (...) {
    return false;
  }
}

void InputDigestsBeside::join() noexcept {
  try {
    tail_.insert(tail_.end(), passed_.begin(), passed_.end());
  } catch (...) {
  }
  passed_.clear();
  if (tail_.empty()) return;
  const Driver& d = Driver::get();
  if (d.update_capture_deps(stream_, tail_.data(), nullptr, tail_.size(),
                            CU_STREAM_ADD_CAPTURE_DEPENDENCIES) != CUDA_SUCCESS) {
    if (fp::state().graph_inputs_unjoined.fetch_add(1, std::memory_order_relaxed) == 0) {
      logLine(
          "a captured GEMM's input digests could not be joined to its stream again: a later kernel "
          "of the graph may change an input before its digest reads it (counted as "
          "graph_gemm_input_digests_unjoined)");
    }
  }
  tail_.clear();
}

void InputDigestsBeside::digestOutputs(uint64_t token, const std::vector<OperandSpec>& specs,
                                       const CallNodes* nodes) noexcept {
  try {
    t_held = {};
    std::vector<CUgraphNode> before, after;
    const bool hold = deferOutputs() && captureDeps(stream_, before);
    fingerprintOperands(token, stream_, specs, /*inputs=*/false, nodes, /*known_uncaptured=*/false);
    if (!hold || !captureDeps(stream_, after) || sameSet(before, after)) return;
    HeldOutput h;
    h.stream = stream_;
    h.capture = captureId(stream_);
    for (const OperandSpec& s : specs) {
      if (s.role != db::OperandRole::kInput) h.reads.emplace_back(s.address, s.address + s.bytes);
    }
    h.before = std::move(before);
    h.after = std::move(after);
    t_held = std::move(h);
  } catch (...) {
    t_held = {};
  }
}

}  // namespace detrace::tracer
