#include "detrace/tracer/operand_specs.h"

#include <algorithm>
#include <utility>

namespace detrace::tracer {
namespace {

// A matrix of `rows` x `cols` elements stored in `order` with leading dimension `ld`, `batch`
// matrices `stride` elements apart. A row-major matrix is stored as a column-major one of
// `cols` x `rows`: its stored lines are its rows. An unreadable one gets no bytes (dropped).
OperandSpec matrix(int32_t slot, const char* name, db::OperandRole role, db::DType dtype,
                   uint64_t address, MatrixOrder order, int64_t rows, int64_t cols, int64_t ld,
                   int32_t batch, int64_t stride) {
  OperandSpec s;
  s.slot = slot;
  s.name = name;
  s.role = role;
  s.dtype = dtype;
  s.address = address;
  if (order == MatrixOrder::kUnreadable) return s;
  if (order == MatrixOrder::kRow) std::swap(rows, cols);
  const int64_t esize = db::dtypeSize(dtype);
  if (esize == 0 || rows <= 0 || cols <= 0 || ld < rows || address == 0) return s;
  batch = batch < 1 ? 1 : batch;
  if (batch > 1 && stride < 0) return s;  // batches below the address: not one extent from it
  const int64_t one = (cols - 1) * ld + rows;  // elements from first to last of one matrix
  s.bytes = static_cast<uint64_t>(((batch - 1) * stride + one) * esize);
  s.shape = batch > 1 ? OperandShape{batch, cols, rows} : OperandShape{cols, rows};
  if (batch == 1 || stride == ld * cols) {  // columns evenly spaced through every batch
    s.rows = cols * batch;
    s.row_bytes = rows * esize;
    s.row_stride = ld * esize;
  }
  return s;
}

// Leaves an operand its whole digest alone.
void dropRows(OperandSpec& s) { s.rows = s.row_bytes = s.row_stride = 0; }

}  // namespace

std::vector<OperandSpec> gemmOperandSpecs(const db::Gemm& g, RowDigests rows,
                                          const GemmLayouts& layouts) {
  using db::OperandRole;
  const auto& order = layouts.order;
  std::vector<OperandSpec> out;
  out.reserve(4);
  // op(A) is m x k: stored m x k (N) or k x m (T). op(B) is k x n: stored k x n (N) or n x k (T).
  int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  out.push_back(matrix(0, "A", OperandRole::kInput, g.a_dtype, static_cast<uint64_t>(g.a_addr),
                       order[0], a_rows, a_cols, g.lda, g.batch_count, g.stride_a));
  out.push_back(matrix(1, "B", OperandRole::kInput, g.b_dtype, static_cast<uint64_t>(g.b_addr),
                       order[1], b_rows, b_cols, g.ldb, g.batch_count, g.stride_b));
  // C is an input wherever it is read, also where it is D (accumulated into in place: its bytes
  // before the call are an input, its bytes after it the output; outputsMayChangeInputs then has
  // the input digested before the call).
  if (g.c_addr != 0 && !layouts.c_unread) {
    out.push_back(matrix(2, "C", OperandRole::kInput, g.c_dtype, static_cast<uint64_t>(g.c_addr),
                         order[2], g.m, g.n, g.ldc, g.batch_count, g.stride_c));
  }
  out.push_back(matrix(3, "D", OperandRole::kOutput, g.d_dtype, static_cast<uint64_t>(g.d_addr),
                       order[3], g.m, g.n, g.ldd, g.batch_count, g.stride_d));
  const bool column_major = std::all_of(order.begin(), order.end(),
                                        [](MatrixOrder o) { return o == MatrixOrder::kColumn; });
  if (rows == RowDigests::kTokens && !column_major) {
    // A caller that stores its matrices by rows computes D = x W directly: the stored lines of D
    // and of an untransposed A are tokens, B's are weight rows.
    for (OperandSpec& s : out) {
      const bool tokens = s.slot == 3 || s.slot == 2 || (s.slot == 0 && !g.trans_a);
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
  switch (c.op) {
    case CollOp::kReduceScatter: send = c.count * n; break;
    case CollOp::kAllGather: recv = c.count * n; break;
    case CollOp::kSend: recv = 0; break;
    case CollOp::kRecv: send = 0; break;
    case CollOp::kAllToAll: send = recv = c.count * n; break;
    case CollOp::kGather: recv = c.count * n; break;   // the root's; none elsewhere (below)
    case CollOp::kScatter: send = c.count * n; break;  // the root's; none elsewhere (below)
    default: break;
  }
  // NCCL ignores a broadcast's send buffer and a reduce's receive buffer on every rank but the
  // root, where the caller may pass any pointer: reading one could fault the program's context.
  const bool non_root = c.comm_rank >= 0 && c.root >= 0 && c.comm_rank != c.root;
  if (non_root && c.op == CollOp::kBroadcast) send = 0;
  if (non_root && (c.op == CollOp::kReduce || c.op == CollOp::kGather)) recv = 0;
  if (non_root && c.op == CollOp::kScatter) send = 0;
  std::vector<OperandSpec> out;
  auto add = [&](int32_t slot, const char* name, db::OperandRole role, int64_t addr, int64_t elems) {
    if (addr == 0 || elems <= 0) return;
    OperandSpec s;
    s.slot = slot;
    s.name = name;
    s.role = role;
    s.dtype = c.dtype;
    s.address = static_cast<uint64_t>(addr);
    s.bytes = static_cast<uint64_t>(elems * esize);
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
