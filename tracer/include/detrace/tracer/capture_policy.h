// What a recording captures and when: the capture level, which library ops get their operands
// copied in `full` mode, and the recording window. Plain C++ (no CUDA): the launcher checks the
// user's options with it and the tracer reads the same settings back from its environment.
//
//   --capture meta|digest|full       DETRACE_CAPTURE
//   --capture-ops LIST               DETRACE_CAPTURE_OPS     gemm, collective, or op names
//   --capture-range A:B              DETRACE_CAPTURE_RANGE   library-op indices A <= i < B
//   --max-capture-bytes N            DETRACE_MAX_CAPTURE_BYTES
//   --window UNIT:A:B                DETRACE_WINDOW          steps, ops or launches A <= i < B
//   --deep WINDOW                    DETRACE_DEEP            the deep window (same forms as --window,
//                                                            plus kernel:NAME@N[-B][+K])
//   --row-digests all|tokens         DETRACE_ROW_DIGESTS     which GEMM operands get per-row digests
//   --graph-weights-every N          DETRACE_GRAPH_WEIGHTS_EVERY  a graph-replayed GEMM's weight
//                                                            digested on every Nth replay only
//
// Library ops (GEMMs and collectives) are numbered per process from 0 in call order: that index
// is the `op` column of `detrace info --ops` and the diff report's "library op #i". A step is an
// NVTX range whose text starts with the step prefix ("step" unless DETRACE_STEP_PREFIX says
// otherwise), numbered from 0 in the order they are pushed.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "detrace/base/status.h"

namespace detrace::tracer {

enum class CaptureLevel { kMeta, kDigest, kFull };

// A half-open range of indices [begin, end).
struct IndexRange {
  int64_t begin = 0;
  int64_t end = std::numeric_limits<int64_t>::max();
  bool contains(int64_t i) const { return i >= begin && i < end; }
  bool all() const { return begin == 0 && end == std::numeric_limits<int64_t>::max(); }
};

// "A:B", "A:" or ":B" (A <= i < B); also a single "A" (just index A).
Result<IndexRange> parseIndexRange(const std::string& text);

struct RecordWindow {
  enum class Unit { kAll, kSteps, kOps, kLaunches, kKernel };
  Unit unit = Unit::kAll;
  IndexRange range;
  // kKernel: from occurrence `range.begin` (counted from 0) of a kernel whose mangled or plain
  // name contains `kernel`, that launch and the `range.end - range.begin - 1` launches after it,
  // and the `before` launches before it (deep windows only: those are fingerprinted
  // speculatively, and kept only once the named launch comes).
  std::string kernel;
  // What is looked for in the launch's (mangled) name: `kernel` itself anywhere in it, or for a
  // qualified name (at::native::foo) its encoding as the Itanium ABI mangles a nested name
  // (2at6native3foo), at the start of the name only (kernelNameMatches).
  std::string kernel_needle;
  bool kernel_qualified = false;
  int64_t before = 0;
};

inline constexpr int64_t kDefaultKernelWindowLaunches = 32;
inline constexpr int64_t kMaxKernelWindowBefore = 256;

// "steps:A:B", "ops:A:B" or "launches:A:B" (the range as in parseIndexRange); "" = everything.
// Also "kernel:NAME@N+K": the Nth launch (from 0) of a kernel whose name contains NAME and the K
// launches after it (K = 31 when "+K" is left out: 32 launches in all), and "kernel:NAME@N-B+K"
// (or "@N-B"): also the B launches before it (B <= kMaxKernelWindowBefore; deep windows only).
Result<RecordWindow> parseWindow(const std::string& text);
// The window as text that parseWindow reads back (for the trace's metadata).
std::string windowText(const RecordWindow& window);
// Whether a launch of the kernel named `name` (mangled, as CUDA gives it; may be null) is one of
// `window`'s kernel. A plain NAME matches anywhere in the name; a qualified one matches the
// kernel's own qualified name, or a namespace it is in (at::native matches every kernel in it),
// never a name inside its template arguments or parameters.
bool kernelNameMatches(const RecordWindow& window, const char* name);

// Which library ops get their operands copied in full mode.
struct OpFilter {
  bool by_kind = false;  // kinds were named: gemms/collectives select
  bool gemms = false;
  bool collectives = false;
  std::vector<std::string> names;  // lower-case substrings of the op's name
  // `is_gemm`: the op is a GEMM (else a collective); `name`: the collective's op ("AllReduce",
  // "ReduceScatter", ...) or the GEMM's entry point ("cublasLtMatmul", "cublasGemmEx", ...).
  // Kinds and names add up; nothing named selects every op.
  bool matches(bool is_gemm, const std::string& name) const;
};

// "gemm", "collective" and/or op names ("AllReduce", "ReduceScatter", "cublasLtMatmul",
// "cublasGemmEx", ...), comma-separated; "" = every library op.
Result<OpFilter> parseOpFilter(const std::string& text);

Result<CaptureLevel> parseCaptureLevel(const std::string& text);
const char* captureLevelName(CaptureLevel level);

inline constexpr int64_t kDefaultMaxCaptureBytes = int64_t{1} << 30;
// The trace writer's queue, in events (record --queue, DETRACE_QUEUE), and its bounds.
inline constexpr int64_t kDefaultQueueEvents = int64_t{1} << 18;
inline constexpr int64_t kMinQueueEvents = 1024, kMaxQueueEvents = int64_t{1} << 24;

// Which of a GEMM's operands get per-row digests besides their whole digest. kTokens (the
// default): only the operands whose stored columns are tokens (B when not transposed, C, D, and A
// when it is batched with a matrix of its own per batch, as eager attention's keys and values
// are); A otherwise (a linear layer's weight) and a transposed B get their whole digest alone, of
// their whole extent (first to last byte, any padding between columns included). kAll: every
// operand whose stored columns are evenly spaced, A's too (in PyTorch's linear layers A is the
// weight, and its "rows" are weight rows: most of a digest trace's bytes, 23,552 row digests per
// token of a small Qwen2, and about a quarter of the tracer's background CPU time on its decode
// loop). Collectives are not affected.
enum class RowDigests { kAll, kTokens };
Result<RowDigests> parseRowDigests(const std::string& text);
const char* rowDigestsName(RowDigests rows);
// --graph-weights-every: a whole number from 1 (every replay, the default) to 1000000.
Result<int64_t> parseGraphWeightsEvery(const std::string& text);

struct CapturePolicy {
  CaptureLevel level = CaptureLevel::kDigest;
  OpFilter ops;
  IndexRange op_range;
  int64_t max_capture_bytes = kDefaultMaxCaptureBytes;
  RecordWindow window;
  // Deep window (`--deep`): launches inside it get their parameters and the memory they can
  // reach fingerprinted before and after them; allocations are tracked (and zero-filled) from the
  // start. Deep implies at least the digest level.
  bool deep = false;
  RecordWindow deep_window;
  std::string step_prefix = "step";
  RowDigests row_digests = RowDigests::kTokens;
  // A GEMM replayed from a CUDA graph gets its weight (an input without rows larger than 64 KiB)
  // digested on replays 0, N, 2N, ... of its executable graph only; the replays between carry the
  // last digest taken (graph_fingerprints.cc). 1: every replay.
  int64_t graph_weights_every = 1;

  // Whether library op number `op_index` (a GEMM or a collective named `name`) gets copies.
  bool capturesOp(int64_t op_index, bool is_gemm, const std::string& name) const {
    return level == CaptureLevel::kFull && op_range.contains(op_index) && ops.matches(is_gemm, name);
  }
  // Whether `text` (an NVTX range's message) starts a step.
  bool isStep(const char* text) const;

  // Reads the DETRACE_* variables above. An invalid value is reported in `problems` (one line
  // each) and replaced by its default, so the tracer can log it and go on.
  static CapturePolicy fromEnvironment(std::vector<std::string>& problems);
};

}  // namespace detrace::tracer
