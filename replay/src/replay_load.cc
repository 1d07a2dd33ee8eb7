// Loading a recorded op for replay: its details, its captured operand bytes (for a collective,
// from every rank of its communicator) and its recorded output, packed into detrace's layouts.
// Capture format (tracer/src/operand_specs.cc): each operand's capture is the raw bytes of its
// whole extent, `bytes` long from `address`: for a GEMM operand its column-major storage with
// its leading dimension, for a collective its send or receive buffer.
#if DETRACE_REPLAY_HAVE_KERNELS

#include <cstring>
#include <optional>
#include <map>

#include <fmt/format.h>

#include "detrace/kernels/digest.h"
#include "detrace/kernels/reduce.h"
#include "replay_internal.h"

namespace detrace::replay::detail {
namespace {

struct RankOperands {
  std::unique_ptr<db::TraceReader> reader;
  std::vector<db::Operand> operands;
  const db::Operand* find(const std::string& name) const {
    for (const auto& o : operands) {
      if (reader->str(o.name) == name) return &o;
    }
    return nullptr;
  }
};

std::string gemmDescription(const db::TraceReader& r, const db::Gemm& g) {
  std::string s = fmt::format("GEMM {} m={} n={} k={} {}{} {}", r.str(g.api), g.m, g.n, g.k,
                              g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', db::dtypeName(g.a_dtype));
  if (g.d_dtype != g.a_dtype) s += fmt::format("->{}", db::dtypeName(g.d_dtype));
  if (g.epilogue > 1) s += fmt::format(" epilogue {}", db::epilogueText(g.epilogue));
  if (g.algo_id >= 0) {
    s += fmt::format(" (algo {}", g.algo_id);
    if (g.tile >= 0) s += fmt::format(" tile {}", g.tile);
    if (g.split_k >= 0) s += fmt::format(" splitK {}", g.split_k);
    s += ")";
  }
  return s;
}

std::string collectiveDescription(const db::TraceReader& r, const db::Collective& c) {
  std::string s = fmt::format("{} {} count={} {} on {} rank(s)", db::collOpName(c.op),
                              db::dtypeName(c.dtype), c.count, db::redOpText(c),
                              c.comm_nranks > 0 ? c.comm_nranks : 1);
  if (c.algo >= 0) s += fmt::format(" ({} {})", r.str(c.algo), r.str(c.proto));
  return s;
}

// "library op #i": GEMMs and collectives are numbered per process in call order, which is what
// `detrace record --capture-range` counts (calls only: not the replays of ops captured into a CUDA
// graph).
Result<int64_t> libraryOpIndex(db::TraceReader& r, int64_t seq) {
  DETRACE_ASSIGN_OR_RETURN(auto gemms, r.gemms());
  DETRACE_ASSIGN_OR_RETURN(auto colls, r.collectives());
  DETRACE_ASSIGN_OR_RETURN(int64_t replays, r.graphOpsBefore(seq));
  int64_t index = 0;
  for (const auto& g : gemms) index += g.first < seq ? 1 : 0;
  for (const auto& c : colls) index += c.first < seq ? 1 : 0;
  return index - replays;
}

std::string recordedCommand(const db::Run& run) {
  std::string cmd;
  for (const auto& a : run.manifest().command) {
    cmd += (cmd.empty() ? "" : " ") + (a.find(' ') == std::string::npos ? a : "'" + a + "'");
  }
  if (cmd.empty() || cmd.size() > 100) return "COMMAND...";
  return cmd;
}

// The error for an op whose operands were not captured, with the record command that would.
Status notCaptured(const db::Run& run, db::TraceReader& r, int32_t rank, int64_t seq,
                   const std::string& what, const std::string& missing, bool is_gemm) {
  auto options = run.manifest().options;
  const std::string level = options.count("capture") ? options["capture"] : "";
  std::string why;
  if (level == "full") {
    why = "the run was recorded with --capture full, but these bytes were not copied (outside "
          "--capture-ops/--capture-range, over --max-capture-bytes, or in a process where CUPTI "
          "did not start: its stderr said that fingerprints are off)";
  } else if (!level.empty()) {
    why = fmt::format("the run was recorded with --capture {}, which keeps fingerprints only", level);
  } else {
    why = "the run keeps fingerprints only";
  }
  auto index = libraryOpIndex(r, seq);
  const std::string range = index.isOk() ? fmt::format(" --capture-range {}", *index) : "";
  return makeError(ErrorCode::kNotFound,
                   "event {} on rank {} ({}) has no captured bytes for {}: {}. Record it again "
                   "with operand copies, e.g. `detrace record --capture full --capture-ops {}{} "
                   "-o RUN_DIR -- {}`, and replay that run's event",
                   seq, rank, what, missing, why, is_gemm ? "gemm" : "collective", range,
                   recordedCommand(run));
}

// The digest docs/digest.md defines for `o`, computed from its captured bytes: the whole extent's,
// or for an operand with rows the whole of its rows' digests. nullopt where the layout cannot be
// read from the bytes (then nothing is checked).
std::optional<uint64_t> digestOfCapture(const db::Operand& o, const Bytes& bytes) {
  if (o.rows <= 0) return kernels::digestCpu(bytes.data(), bytes.size());
  int64_t last = 0, end = 0;
  if (o.rows > (int64_t{1} << 31) || o.row_bytes < 0 || o.row_stride < 0 ||
      __builtin_mul_overflow(o.rows - 1, o.row_stride, &last) || __builtin_add_overflow(last, o.row_bytes, &end) ||
      end > static_cast<int64_t>(bytes.size())) {
    return std::nullopt;
  }
  std::vector<uint64_t> rows(static_cast<size_t>(o.rows));
  kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(o.rows), static_cast<uint64_t>(o.row_bytes),
                         static_cast<uint64_t>(o.row_stride), rows.data());
  return kernels::wholeOfRowsCpu(rows.data(), rows.size());
}

Result<Bytes> capturedBytes(db::TraceReader& r, const db::Operand& o) {
  DETRACE_ASSIGN_OR_RETURN(Bytes bytes, r.captureBytes(o.id));
  if (static_cast<int64_t>(bytes.size()) != o.bytes) {
    return makeError(ErrorCode::kCorrupt,
                     "operand {} of event {}: {} captured bytes for an extent of {} bytes; the "
                     "trace is damaged or was written by another capture format",
                     r.str(o.name), o.seq, bytes.size(), o.bytes);
  }
  // The copy and the fingerprint were taken at the same point of the op's stream: bytes that do
  // not give the recorded digest were damaged since, and a replay on them would mislead.
  if (o.has_digest) {
    if (std::optional<uint64_t> d = digestOfCapture(o, bytes); d && *d != o.digest) {
      return makeError(ErrorCode::kCorrupt,
                       "operand {} of event {}: its captured bytes do not give the fingerprint "
                       "recorded with them; the trace is damaged. Re-record the run",
                       r.str(o.name), o.seq);
    }
  }
  return bytes;
}

// out[i][j] = src[i * row_step + j * col_step] for an rows x cols result, elements of `esize`.
Result<Bytes> pack(const Bytes& src, int64_t rows, int64_t cols, int64_t row_step,
                   int64_t col_step, int esize, const char* what) {
  // Steps must be positive and the extent must not overflow: a damaged or foreign trace can carry
  // any leading dimension.
  int64_t a = 0, b = 0, last = 0, need = 0;
  bool bad = rows <= 0 || cols <= 0 || row_step <= 0 || col_step <= 0 || esize <= 0 ||
             __builtin_mul_overflow(rows - 1, row_step, &a) || __builtin_mul_overflow(cols - 1, col_step, &b) ||
             __builtin_add_overflow(a, b, &last) || __builtin_mul_overflow(last + 1, int64_t{esize}, &need) ||
             rows > (int64_t{1} << 40) / cols;
  if (bad) {
    return makeError(ErrorCode::kCorrupt,
                     "the captured {} has an impossible layout ({} x {}, steps {} and {}); the trace "
                     "is damaged or was written by another capture format",
                     what, rows, cols, row_step, col_step);
  }
  if (need > static_cast<int64_t>(src.size())) {
    return makeError(ErrorCode::kCorrupt,
                     "the captured {} ({} bytes) is smaller than its recorded shape needs", what,
                     src.size());
  }
  Bytes out(static_cast<size_t>(rows * cols * esize));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      std::memcpy(out.data() + (i * cols + j) * esize, src.data() + (i * row_step + j * col_step) * esize,
                  static_cast<size_t>(esize));
    }
  }
  return out;
}

Status checkGemmSupported(const db::Gemm& g) {
  const auto in = g.a_dtype;
  if (g.batch_count > 1) {
    return makeError(ErrorCode::kInvalidArgument,
                     "batched GEMMs (batch count {}) cannot be replayed yet", g.batch_count);
  }
  if ((in != db::DType::kBF16 && in != db::DType::kF16) || g.b_dtype != in ||
      (g.d_dtype != in && g.d_dtype != db::DType::kF32)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "replay supports GEMMs with bf16 or fp16 inputs and an output of the same "
                     "type or fp32; this one is {} x {} -> {}",
                     db::dtypeName(g.a_dtype), db::dtypeName(g.b_dtype), db::dtypeName(g.d_dtype));
  }
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM with an empty shape (m={} n={} k={})", g.m,
                     g.n, g.k);
  }
  return Status::ok();
}

// Recorded output: captured bytes (packed) and/or digests of the packed rows.
void setRecorded(LoadedOp& op, const db::Operand* out, std::optional<Bytes> packed,
                 bool extent_is_packed, const std::string& name) {
  if (packed) {
    op.recorded_digest = digestOf(*packed);
    op.recorded_row_digests =
        rowDigestsOf(*packed, op.header.output.rows,
                     op.header.output.cols * db::dtypeSize(op.header.output.dtype));
    op.recorded_bytes = std::move(packed);
    op.header.recorded = "captured " + name;
    return;
  }
  if (out == nullptr) return;
  // An operand with rows is recorded with the whole of its rows' digests (wholeOfRowsCpu), not the
  // extent's: its row digests are what compares to a replay's output.
  if (out->has_digest && extent_is_packed && out->rows <= 0) op.recorded_digest = out->digest;
  if (static_cast<int64_t>(out->row_digests.size()) == op.header.output.rows &&
      out->row_bytes == op.header.output.cols * db::dtypeSize(op.header.output.dtype)) {
    op.recorded_row_digests = out->row_digests;
  }
  if (op.recorded_digest || !op.recorded_row_digests.empty()) {
    op.header.recorded = "digest of " + name;
  }
}

Result<LoadedOp> loadGemm(const db::Run& run, const EventRef& ref, RankOperands& ro,
                          const db::Gemm& g) {
  db::TraceReader& r = *ro.reader;
  LoadedOp op;
  op.header.kind = "gemm";
  op.header.op = gemmDescription(r, g);
  DETRACE_RETURN_IF_ERROR(checkGemmSupported(g));
  const db::Operand* a = ro.find("A");
  const db::Operand* b = ro.find("B");
  const db::Operand* d = ro.find("D");
  std::string missing;
  for (auto [o, name] : {std::pair{a, "A"}, std::pair{b, "B"}}) {
    if (o == nullptr || o->capture_bytes <= 0) missing += (missing.empty() ? "" : " and ") + std::string(name);
  }
  if (!missing.empty()) {
    const bool both = missing.size() > 1;
    return notCaptured(run, r, ref.rank, ref.seq, op.header.op,
                       (both ? "operands " : "operand ") + missing, true);
  }
  auto p = std::make_shared<GemmProblem>();
  p->m = g.n;
  p->n = g.m;
  p->k = g.k;
  p->in = g.a_dtype;
  p->out = g.d_dtype;
  p->recorded = g;
  DETRACE_ASSIGN_OR_RETURN(Bytes a_bytes, capturedBytes(r, *a));
  DETRACE_ASSIGN_OR_RETURN(Bytes b_bytes, capturedBytes(r, *b));
  // Our A (tokens x K) is op(B_cb)^T; our B (N x K) is op(A_cb). Steps in elements.
  DETRACE_ASSIGN_OR_RETURN(p->a, pack(b_bytes, p->m, p->k, g.trans_b ? 1 : g.ldb,
                                      g.trans_b ? g.ldb : 1, 2, "B operand"));
  DETRACE_ASSIGN_OR_RETURN(p->b, pack(a_bytes, p->n, p->k, g.trans_a ? g.lda : 1,
                                      g.trans_a ? 1 : g.lda, 2, "A operand"));
  op.header.output = {p->out, p->m, p->n};
  op.header.tokens = p->m;
  const bool tn = g.trans_a && !g.trans_b && g.lda == g.k && g.ldb == g.k && g.ldd == g.m;
  if (!tn) {
    op.header.notes.push_back(fmt::format(
        "the recorded layout ({}{}, lda {} ldb {} ldd {}) was repacked to detrace's TN layout; "
        "`recorded` runs the recorded algorithm on the repacked operands",
        g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.lda, g.ldb, g.ldd));
  }
  if (ro.find("C") != nullptr) {
    op.header.notes.push_back(
        "the call has a C operand; replay computes D = A·B (alpha 1, beta 0: not recorded)");
  }
  // The recorded cuBLASLt epilogue; traces from before it was recorded name it by its operands
  // (tracer/include/detrace/tracer/operand_specs.h).
  if (g.epilogue > 1) {
    op.header.notes.push_back(fmt::format(
        "the call has the cuBLASLt epilogue {}; replay computes D = A·B without it",
        db::epilogueText(g.epilogue)));
  } else if (g.epilogue == db::kUnset && (ro.find("bias") != nullptr || ro.find("aux") != nullptr)) {
    op.header.notes.push_back(
        "the call has a cuBLASLt epilogue (bias or aux operands); replay computes D = A·B without "
        "it (the trace does not say which epilogue: it predates their recording)");
  }
  const std::string compute = r.str(g.compute_type);
  if (!compute.empty() && compute != "CUBLAS_COMPUTE_32F") {
    op.header.notes.push_back(fmt::format(
        "recorded compute type {}; every implementation here accumulates in fp32", compute));
  }
  std::optional<Bytes> d_packed;
  if (d != nullptr && d->capture_bytes > 0) {
    DETRACE_ASSIGN_OR_RETURN(Bytes d_bytes, capturedBytes(r, *d));
    DETRACE_ASSIGN_OR_RETURN(Bytes packed, pack(d_bytes, p->m, p->n, g.ldd, 1,
                                                db::dtypeSize(p->out), "D operand"));
    d_packed = std::move(packed);
  }
  setRecorded(op, d, std::move(d_packed), g.ldd == g.m, "D");
  op.input_row_keys = rowDigestsOf(p->a, p->m, p->k * 2);
  op.shared_input_key = digestOf(p->b);
  op.gemm = std::move(p);
  return op;
}

// The send buffers of every comm rank of the collective `c` (seq on ref.rank), by comm rank.
Status gatherSends(const db::Run& run, const EventRef& ref, RankOperands& ro, const db::Collective& c,
                   const std::string& what, CollectiveProblem& p) {
  p.inputs.assign(static_cast<size_t>(p.nranks), {});
  std::vector<bool> found(static_cast<size_t>(p.nranks), false);
  auto take = [&](RankOperands& other, int64_t seq, int32_t rank, int32_t comm_rank) -> Status {
    const db::Operand* send = other.find("send");
    if (send == nullptr || send->capture_bytes <= 0) {
      return notCaptured(run, *other.reader, rank, seq, what, "its send buffer", false);
    }
    DETRACE_ASSIGN_OR_RETURN(p.inputs[static_cast<size_t>(comm_rank)], capturedBytes(*other.reader, *send));
    found[static_cast<size_t>(comm_rank)] = true;
    return Status::ok();
  };
  if (p.nranks > 1 && (c.comm_rank < 0 || c.comm_rank >= p.nranks)) {
    return makeError(ErrorCode::kCorrupt, "event {} on rank {}: comm rank {} of {} ranks", ref.seq,
                     ref.rank, c.comm_rank, p.nranks);
  }
  DETRACE_RETURN_IF_ERROR(take(ro, ref.seq, ref.rank, p.nranks > 1 ? c.comm_rank : 0));
  if (p.nranks > 1 && c.comm_id == db::kUnset) {
    return makeError(ErrorCode::kInvalidArgument,
                     "event {} on rank {} has no communicator id, so its peers' buffers cannot be "
                     "found", ref.seq, ref.rank);
  }
  for (const auto& rf : run.ranks()) {
    if (p.nranks == 1 || rf.rank == ref.rank) continue;
    RankOperands other;
    DETRACE_ASSIGN_OR_RETURN(other.reader, run.openRank(rf.rank));
    DETRACE_ASSIGN_OR_RETURN(auto colls, other.reader->collectives());
    for (const auto& [seq, oc] : colls) {
      if (oc.comm_id != c.comm_id || oc.comm_seq != c.comm_seq) continue;
      if (oc.comm_rank < 0 || oc.comm_rank >= p.nranks || oc.op != c.op || oc.count != c.count) {
        return makeError(ErrorCode::kCorrupt,
                         "rank {}'s event {} does not match event {} of rank {} (same "
                         "communicator call, different op, count or comm rank)",
                         rf.rank, seq, ref.seq, ref.rank);
      }
      DETRACE_ASSIGN_OR_RETURN(other.operands, other.reader->operands(seq));
      DETRACE_RETURN_IF_ERROR(take(other, seq, rf.rank, oc.comm_rank));
      break;
    }
  }
  for (int q = 0; q < p.nranks; ++q) {
    if (!found[static_cast<size_t>(q)]) {
      return makeError(ErrorCode::kNotFound,
                       "comm rank {} of this {} is in no trace file of the run ({} file(s)); "
                       "replay needs every rank's send buffer",
                       q, db::collOpName(c.op), run.ranks().size());
    }
  }
  for (const auto& in : p.inputs) {
    if (static_cast<int64_t>(in.size()) != p.send_count * db::dtypeSize(p.dtype)) {
      return makeError(ErrorCode::kCorrupt, "a send buffer of {} bytes where {} elements were "
                       "recorded", in.size(), p.send_count);
    }
  }
  return Status::ok();
}

Result<LoadedOp> loadCollective(const db::Run& run, const EventRef& ref, RankOperands& ro,
                                const db::Collective& c) {
  LoadedOp op;
  op.header.kind = "collective";
  op.header.op = collectiveDescription(*ro.reader, c);
  if (c.op != db::CollOp::kAllReduce && c.op != db::CollOp::kReduceScatter &&
      c.op != db::CollOp::kReduce) {
    return makeError(ErrorCode::kInvalidArgument,
                     "event {} is an {}, which moves bytes without arithmetic; replay re-executes "
                     "reductions (AllReduce, ReduceScatter, Reduce) and GEMMs",
                     ref.seq, db::collOpName(c.op));
  }
  if (c.redop != db::RedOp::kSum || !isFloatDType(c.dtype)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "replay supports sum reductions of fp32, fp16 and bf16; this one is {} of {}",
                     db::redOpText(c), db::dtypeName(c.dtype));
  }
  auto p = std::make_shared<CollectiveProblem>();
  p->op = c.op;
  p->dtype = c.dtype;
  p->nranks = c.comm_nranks > 0 ? c.comm_nranks : 1;
  p->out_rank = p->nranks > 1 ? c.comm_rank : 0;
  p->root = c.root >= 0 ? c.root : 0;
  p->count = c.count;
  p->send_count = c.op == db::CollOp::kReduceScatter ? c.count * p->nranks : c.count;
  p->offset = c.op == db::CollOp::kReduceScatter ? c.count * p->out_rank : 0;
  if (p->nranks > kernels::kMaxReduceRanks) {
    return makeError(ErrorCode::kInvalidArgument, "{} ranks: more than replay's {}", p->nranks,
                     kernels::kMaxReduceRanks);
  }
  DETRACE_RETURN_IF_ERROR(gatherSends(run, ref, ro, c, op.header.op, *p));
  const db::Operand* recv = ro.find("recv");
  const int esize = db::dtypeSize(p->dtype);
  int64_t rows = 1, cols = p->count;
  if (recv != nullptr && recv->rows > 0 && recv->row_bytes > 0 && recv->row_bytes % esize == 0 &&
      recv->rows * (recv->row_bytes / esize) == p->count) {
    rows = recv->rows;
    cols = recv->row_bytes / esize;
  }
  op.header.output = {p->dtype, rows, cols};
  op.header.tokens = rows;
  if (c.op == db::CollOp::kReduce && p->out_rank != p->root) {
    op.header.notes.push_back(fmt::format(
        "rank {} is not the root ({}) of this Reduce; its recorded output is not the sum",
        ref.rank, p->root));
  }
  std::optional<Bytes> recv_bytes;
  if (recv != nullptr && recv->capture_bytes > 0) {
    DETRACE_ASSIGN_OR_RETURN(Bytes bytes, capturedBytes(*ro.reader, *recv));
    recv_bytes = std::move(bytes);
  }
  setRecorded(op, recv, std::move(recv_bytes), true, "recv");
  // A row's inputs: that row of every rank's send segment, in comm-rank order.
  const int64_t row_bytes = cols * esize;
  for (int64_t i = 0; i < rows; ++i) {
    Bytes key;
    for (const auto& in : p->inputs) {
      const auto* begin = in.data() + p->offset * esize + i * row_bytes;
      key.insert(key.end(), begin, begin + row_bytes);
    }
    op.input_row_keys.push_back(digestOf(key));
  }
  op.collective = std::move(p);
  return op;
}

}  // namespace

uint64_t digestOf(const Bytes& bytes) { return kernels::digestCpu(bytes.data(), bytes.size()); }

std::vector<uint64_t> rowDigestsOf(const Bytes& bytes, int64_t rows, int64_t row_bytes) {
  std::vector<uint64_t> out(static_cast<size_t>(rows));
  if (rows > 0 && rows * row_bytes <= static_cast<int64_t>(bytes.size())) {
    kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(rows),
                           static_cast<uint64_t>(row_bytes), static_cast<uint64_t>(row_bytes),
                           out.data());
  }
  return out;
}

Result<LoadedOp> loadOp(const db::Run& run, const EventRef& ref) {
  if (run.findRank(ref.rank) == nullptr) {
    std::string ranks;
    for (const auto& rf : run.ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rf.rank);
    return makeError(ErrorCode::kNotFound, "{} has no rank {} (its ranks: {})", run.path(),
                     ref.rank, ranks);
  }
  RankOperands ro;
  DETRACE_ASSIGN_OR_RETURN(ro.reader, run.openRank(ref.rank));
  auto event = ro.reader->event(ref.seq);
  if (!event.isOk() && event.status().code() != ErrorCode::kNotFound) return event.status();
  if (!event.isOk()) {
    auto count = ro.reader->eventCount();
    return makeError(ErrorCode::kNotFound, "rank {} of {} has no event {} (events 0 to {})",
                     ref.rank, run.path(), ref.seq, count.isOk() ? *count - 1 : -1);
  }
  DETRACE_ASSIGN_OR_RETURN(ro.operands, ro.reader->operands(ref.seq));
  Result<LoadedOp> op = Status(ErrorCode::kInternal, "unset");
  if (event->kind == db::EventKind::kGemm) {
    DETRACE_ASSIGN_OR_RETURN(auto g, ro.reader->gemm(ref.seq));
    if (!g) return makeError(ErrorCode::kCorrupt, "GEMM event {} has no GEMM details", ref.seq);
    op = loadGemm(run, ref, ro, *g);
  } else if (event->kind == db::EventKind::kCollective) {
    DETRACE_ASSIGN_OR_RETURN(auto c, ro.reader->collective(ref.seq));
    if (!c) return makeError(ErrorCode::kCorrupt, "collective event {} has no details", ref.seq);
    op = loadCollective(run, ref, ro, *c);
  } else {
    return makeError(ErrorCode::kInvalidArgument,
                     "event {} on rank {} is a {} ({}); replay re-executes GEMMs and reducing "
                     "collectives",
                     ref.seq, ref.rank, db::eventKindName(event->kind), ro.reader->str(event->name));
  }
  if (!op.isOk()) return op.status();
  op->header.run = run.path();
  op->header.rank = ref.rank;
  op->header.seq = ref.seq;
  return op;
}

}  // namespace detrace::replay::detail

#endif  // DETRACE_REPLAY_HAVE_KERNELS
