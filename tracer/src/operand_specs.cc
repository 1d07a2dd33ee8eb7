#include "detrace/tracer/operand_specs.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace detrace::tracer {
namespace {

using db::DType;
using db::OperandRole;

// Extents past this are no operand a GPU holds (16 TiB): arguments a library would refuse. Such an
// operand, or one whose size overflows 64 bits, gets no extent (no digest: a digest of a refused
// call's made-up extent could read past its memory and fault the program's context).
constexpr int64_t kMaxExtentBytes = int64_t{1} << 44;

// a * b + c, or nullopt where it overflows or leaves [0, kMaxExtentBytes].
std::optional<int64_t> extent(int64_t a, int64_t b, int64_t c = 0) {
  int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  if (sum < 0 || sum > kMaxExtentBytes) return std::nullopt;
  return sum;
}

// An operand without an extent yet (no bytes: dropped unless one is given).
OperandSpec named(int32_t slot, const char* name, OperandRole role, DType dtype, uint64_t address) {
  OperandSpec s;
  s.slot = slot;
  s.name = name;
  s.role = role;
  s.dtype = dtype;
  s.address = address;
  return s;
}

// A matrix of `rows` x `cols` elements stored in `order` with leading dimension `ld`, `batch`
// matrices `stride` elements apart. A row-major matrix is stored as a column-major one of
// `cols` x `rows`: its stored lines are its rows. An unreadable one gets no bytes (dropped).
OperandSpec matrix(int32_t slot, const char* name, OperandRole role, DType dtype,
                   uint64_t address, MatrixOrder order, int64_t rows, int64_t cols, int64_t ld,
                   int32_t batch, int64_t stride) {
  OperandSpec s = named(slot, name, role, dtype, address);
  if (order == MatrixOrder::kUnreadable) return s;
  if (order == MatrixOrder::kRow) std::swap(rows, cols);
  const int64_t esize = db::dtypeSize(dtype);
  if (esize == 0 || rows <= 0 || cols <= 0 || ld < rows || address == 0) return s;
  batch = batch < 1 ? 1 : batch;
  if (batch > 1 && stride < 0) return s;  // batches below the address: not one extent from it
  // Elements from first to last of one matrix, then of every batch, then bytes.
  const std::optional<int64_t> one = extent(cols - 1, ld, rows);
  const std::optional<int64_t> all = one ? extent(batch - 1, stride, *one) : std::nullopt;
  const std::optional<int64_t> bytes = all ? extent(*all, esize) : std::nullopt;
  if (!bytes) return s;
  s.bytes = static_cast<uint64_t>(*bytes);
  s.shape = batch > 1 ? OperandShape{batch, cols, rows} : OperandShape{cols, rows};
  // Columns evenly spaced through every batch. (cols * batch and rows * esize are within bytes;
  // ld * esize is not where there is one column, whose ld nothing bounds.)
  const std::optional<int64_t> line = extent(ld, esize);
  if (line && (batch == 1 || stride == ld * cols)) {
    s.rows = cols * batch;
    s.row_bytes = rows * esize;
    s.row_stride = *line;
  }
  return s;
}

// A vector of `len` elements, `batch` of them `stride` elements apart (stride 0: one vector for
// every batch). No rows: a vector is one weight or one scale, not tokens.
OperandSpec vectorOperand(int32_t slot, const char* name, OperandRole role, DType dtype,
                          uint64_t address, int64_t len, int32_t batch = 1, int64_t stride = 0) {
  OperandSpec s = named(slot, name, role, dtype, address);
  const int64_t esize = db::dtypeSize(dtype);
  if (esize == 0 || len <= 0 || address == 0 || (batch > 1 && stride < 0)) return s;
  const int64_t n = batch > 1 && stride > 0 ? batch : 1;
  const std::optional<int64_t> elems = extent(n - 1, stride, len);
  const std::optional<int64_t> bytes = elems ? extent(*elems, esize) : std::nullopt;
  if (!bytes) return s;
  s.bytes = static_cast<uint64_t>(*bytes);
  s.shape = n > 1 ? OperandShape{n, len} : OperandShape{len};
  return s;
}

// Leaves an operand its whole digest alone.
void dropRows(OperandSpec& s) { s.rows = s.row_bytes = s.row_stride = 0; }

// ---- cuBLASLt's epilogue and scaling operands (LtOperands) ----

bool isFp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

// An FP8 kernel writing fp32 or fp8: cublasLt.h names its default bias and aux types as
// exceptions without giving them.
bool fp8Exception(const db::Gemm& g) {
  return (isFp8(g.a_dtype) || isFp8(g.b_dtype)) && (g.d_dtype == DType::kF32 || isFp8(g.d_dtype));
}

// The bias's type (BIAS_DATA_TYPE): the descriptor's, else cuBLASLt's default: D's (a bias
// gradient's is C's, the same outside FP8 kernels), the scale type for an int8 D accumulated in
// int32 (IMMA); unknown (no digest) for the FP8 exceptions.
DType biasDtype(const db::Gemm& g, const LtOperands& lt) {
  if (lt.bias_dtype) return *lt.bias_dtype;
  if (lt.imma && g.d_dtype == DType::kI8) return lt.scale_type;
  return fp8Exception(g) ? DType::kUnknown : g.d_dtype;
}

// The aux matrix's type (EPILOGUE_AUX_DATA_TYPE): the descriptor's, else D's; unknown (no digest)
// for the FP8 exceptions and an int8 D, whose defaults cublasLt.h does not give.
DType auxDtype(const db::Gemm& g, const LtOperands& lt) {
  if (lt.aux_dtype) return *lt.aux_dtype;
  return fp8Exception(g) || g.d_dtype == DType::kI8 ? DType::kUnknown : g.d_dtype;
}

// The epilogue's auxiliary matrix: m x n like D, column-major, EPILOGUE_AUX_LD apart. ReLU's mask
// has a bit per element, its ld and batch stride in bits (multiples of 128, cuBLASLt's rule: each
// column starts on a byte): it is digested as bytes, ceil(m / 8) per column, whose last byte may
// hold bits past m. A D of another order leaves the aux's layout undocumented: no digest.
OperandSpec auxMatrix(const db::Gemm& g, const LtOperands& lt, const EpilogueUse& use,
                      MatrixOrder d_order) {
  const OperandRole role = use.aux == AuxUse::kWritten ? OperandRole::kOutput : OperandRole::kInput;
  MatrixOrder order = d_order == MatrixOrder::kColumn ? d_order : MatrixOrder::kUnreadable;
  if (!use.mask) {
    return matrix(kSlotAux, "aux", role, auxDtype(g, lt), lt.aux, order, g.m, g.n, lt.aux_ld,
                  g.batch_count, lt.aux_stride);
  }
  if (lt.aux_ld % 8 != 0 || lt.aux_stride % 8 != 0) order = MatrixOrder::kUnreadable;
  return matrix(kSlotAux, "aux", role, DType::kU8, lt.aux, order, (g.m + 7) / 8, g.n,
                lt.aux_ld / 8, g.batch_count, lt.aux_stride / 8);
}

// A scale's length in floats: 1 for a scalar; m for A's outer vector (a float per row of op(A)),
// n for B's (per column of op(B)); 0 (no digest) for other modes, another matrix's outer vector
// and batched outer vectors, whose layouts cublasLt.h does not give.
int64_t scaleLength(const LtScale& s, int32_t slot, const db::Gemm& g) {
  switch (s.mode) {
    case LtScaleMode::kScalar: return 1;
    case LtScaleMode::kOuterVector:
      if (g.batch_count > 1) return 0;
      return slot == kSlotScaleA ? g.m : slot == kSlotScaleB ? g.n : 0;
    default: return 0;
  }
}

// The scales (inputs) and amax values (outputs) of an FP8 GEMM, in slot order: C's scale where C
// is read, the aux's where the epilogue has one, its amax where it writes one.
void addScales(std::vector<OperandSpec>& out, const db::Gemm& g, const LtOperands& lt, bool c_read,
               AuxUse aux) {
  auto scale = [&](size_t i, int32_t slot, const char* name) {
    const LtScale& s = lt.scales[i];
    if (s.address == 0) return;
    out.push_back(vectorOperand(slot, name, OperandRole::kInput, DType::kF32, s.address,
                                scaleLength(s, slot, g)));
  };
  auto amax = [&](uint64_t address, int32_t slot, const char* name) {
    if (address == 0) return;
    out.push_back(vectorOperand(slot, name, OperandRole::kOutput, DType::kF32, address, 1));
  };
  scale(0, kSlotScaleA, "A_scale");
  scale(1, kSlotScaleB, "B_scale");
  if (c_read) scale(2, kSlotScaleC, "C_scale");
  scale(3, kSlotScaleD, "D_scale");
  amax(lt.amax_d, kSlotAmaxD, "D_amax");
  if (aux != AuxUse::kNone) scale(4, kSlotScaleAux, "aux_scale");
  if (aux == AuxUse::kWritten) amax(lt.amax_aux, kSlotAmaxAux, "aux_amax");
}

// The operands a cuBLASLt descriptor adds after D (LtOperands), each where cuBLASLt uses it.
void addLtOperands(std::vector<OperandSpec>& out, const db::Gemm& g, const GemmLayouts& layouts,
                   bool c_read) {
  const LtOperands& lt = layouts.lt;
  const EpilogueUse use = epilogueUse(lt.epilogue);
  if (use.bias != BiasUse::kNone && lt.bias != 0) {
    const bool read = use.bias == BiasUse::kAdded;
    const OperandRole role = read ? OperandRole::kInput : OperandRole::kOutput;
    const int64_t len = use.bias == BiasUse::kGradCols ? g.n : g.m;
    out.push_back(vectorOperand(kSlotBias, "bias", role, biasDtype(g, lt), lt.bias, len,
                                g.batch_count, lt.bias_stride));
  }
  if (use.aux != AuxUse::kNone && lt.aux != 0) {
    out.push_back(auxMatrix(g, lt, use, layouts.order[kSlotD]));
  }
  addScales(out, g, lt, c_read, use.aux);
}

}  // namespace

EpilogueUse epilogueUse(uint32_t epilogue) {
  using E = LtEpilogue;
  using B = BiasUse;
  using X = AuxUse;
  switch (static_cast<E>(epilogue)) {
    case E::kBias: case E::kReluBias: case E::kGeluBias: return {B::kAdded};
    case E::kReluAux: return {B::kNone, X::kWritten, true};
    case E::kReluAuxBias: return {B::kAdded, X::kWritten, true};
    case E::kGeluAux: return {B::kNone, X::kWritten};
    case E::kGeluAuxBias: return {B::kAdded, X::kWritten};
    case E::kDRelu: return {B::kNone, X::kRead, true};
    case E::kDReluBGrad: return {B::kGradRows, X::kRead, true};
    case E::kDGelu: return {B::kNone, X::kRead};
    case E::kDGeluBGrad: return {B::kGradRows, X::kRead};
    case E::kBGradA: return {B::kGradRows};
    case E::kBGradB: return {B::kGradCols};
    default: return {};  // DEFAULT, RELU, GELU, or an epilogue newer than the tracer
  }
}

std::vector<OperandSpec> gemmOperandSpecs(const db::Gemm& g, RowDigests rows,
                                          const GemmLayouts& layouts) {
  // No batch at all (an empty micro-batch's strided GEMM): the call reads and writes nothing, and
  // its pointers may point anywhere (past the end of an arena). A negative count is refused.
  if (g.batch_count < 1) return {};
  const auto& order = layouts.order;
  std::vector<OperandSpec> out;
  out.reserve(4);
  // op(A) is m x k: stored m x k (N) or k x m (T). op(B) is k x n: stored k x n (N) or n x k (T).
  int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  out.push_back(matrix(kSlotA, "A", OperandRole::kInput, g.a_dtype, static_cast<uint64_t>(g.a_addr),
                       order[0], a_rows, a_cols, g.lda, g.batch_count, g.stride_a));
  out.push_back(matrix(kSlotB, "B", OperandRole::kInput, g.b_dtype, static_cast<uint64_t>(g.b_addr),
                       order[1], b_rows, b_cols, g.ldb, g.batch_count, g.stride_b));
  // C is an input wherever it is read, also where it is D (accumulated into in place: its bytes
  // before the call are an input, its bytes after it the output; outputsMayChangeInputs then has
  // the input digested before the call).
  const bool c_read = g.c_addr != 0 && !layouts.c_unread;
  if (c_read) {
    out.push_back(matrix(kSlotC, "C", OperandRole::kInput, g.c_dtype,
                         static_cast<uint64_t>(g.c_addr), order[2], g.m, g.n, g.ldc, g.batch_count,
                         g.stride_c));
  }
  out.push_back(matrix(kSlotD, "D", OperandRole::kOutput, g.d_dtype,
                       static_cast<uint64_t>(g.d_addr), order[3], g.m, g.n, g.ldd, g.batch_count,
                       g.stride_d));
  addLtOperands(out, g, layouts, c_read);
  const bool column_major = std::all_of(order.begin(), order.end(),
                                        [](MatrixOrder o) { return o == MatrixOrder::kColumn; });
  if (rows == RowDigests::kTokens && !column_major) {
    // A caller that stores its matrices by rows computes D = x W directly: the stored lines of D
    // (and of the aux matrix, shaped as D) and of an untransposed A are tokens, B's weight rows.
    for (OperandSpec& s : out) {
      const bool tokens = s.slot == kSlotD || s.slot == kSlotC || s.slot == kSlotAux ||
                          (s.slot == kSlotA && !g.trans_a);
      if (!tokens) dropRows(s);
    }
  } else if (rows == RowDigests::kTokens) {
    // A of one matrix (or one matrix for every batch) is a linear layer's weight: its columns are
    // weight rows. A with a matrix of its own per batch is an activation (eager attention's keys
    // or values, one matrix per sequence and head), whose columns are tokens: it keeps them.
    const bool a_per_batch = g.batch_count > 1 && g.stride_a != 0;
    if (!a_per_batch) dropRows(out[0]);
    if (g.trans_b) dropRows(out[1]);   // B^T: stored n x k, its columns run along k
  }
  std::erase_if(out, [](const OperandSpec& s) { return s.bytes == 0; });
  return out;
}

std::vector<OperandSpec> collectiveOperandSpecs(const db::Collective& c, int64_t row_bytes) {
  using db::CollOp;
  const int64_t esize = db::dtypeSize(c.dtype);
  if (esize == 0 || c.count <= 0) return {};
  const int64_t n = c.comm_nranks > 0 ? c.comm_nranks : 1;
  int64_t send = c.count, recv = c.count;
  const int64_t all = extent(c.count, n).value_or(0);  // every rank's count (0: past any memory)
  switch (c.op) {
    case CollOp::kReduceScatter: send = all; break;
    case CollOp::kAllGather: recv = all; break;
    case CollOp::kSend: recv = 0; break;
    case CollOp::kRecv: send = 0; break;
    case CollOp::kAllToAll: send = recv = all; break;
    case CollOp::kGather: recv = all; break;   // the root's; none elsewhere (below)
    case CollOp::kScatter: send = all; break;  // the root's; none elsewhere (below)
    default: break;
  }
  // NCCL ignores a broadcast's send buffer and a reduce's receive buffer on every rank but the
  // root, where the caller may pass any pointer: reading one could fault the program's context.
  // A rank the tracer does not know (a communicator it could not follow) may be any rank: those
  // buffers are left out there too, the root's included.
  const bool non_root = c.root >= 0 && c.comm_rank != c.root;
  if (non_root && c.op == CollOp::kBroadcast) send = 0;
  if (non_root && (c.op == CollOp::kReduce || c.op == CollOp::kGather)) recv = 0;
  if (non_root && c.op == CollOp::kScatter) send = 0;
  std::vector<OperandSpec> out;
  auto add = [&](int32_t slot, const char* name, db::OperandRole role, int64_t addr, int64_t elems) {
    const std::optional<int64_t> bytes = extent(elems, esize);
    if (addr == 0 || elems <= 0 || !bytes) return;
    OperandSpec s;
    s.slot = slot;
    s.name = name;
    s.role = role;
    s.dtype = c.dtype;
    s.address = static_cast<uint64_t>(addr);
    s.bytes = static_cast<uint64_t>(*bytes);
    s.shape = {elems};
    if (row_bytes > 0 && static_cast<int64_t>(s.bytes) % row_bytes == 0) {
      s.rows = static_cast<int64_t>(s.bytes) / row_bytes;
      s.row_bytes = row_bytes;
      s.row_stride = row_bytes;
      s.shape = {s.rows, row_bytes / esize};
    }
    out.push_back(s);
  };
  add(0, "send", db::OperandRole::kInput, c.send_addr, send);
  add(1, "recv", db::OperandRole::kOutput, c.recv_addr, recv);
  return out;
}

bool outputsMayChangeInputs(const std::vector<OperandSpec>& specs) {
  using db::OperandRole;
  for (const OperandSpec& out : specs) {
    if (out.role == OperandRole::kInOut) return true;
    if (out.role != OperandRole::kOutput) continue;
    for (const OperandSpec& in : specs) {
      if (in.role != OperandRole::kInput) continue;
      const bool disjoint = out.address + out.bytes <= in.address || in.address + in.bytes <= out.address;
      if (!disjoint) return true;
    }
  }
  return false;
}

}  // namespace detrace::tracer
