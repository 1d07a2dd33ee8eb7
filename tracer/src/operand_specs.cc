#include "detrace/tracer/operand_specs.h"

namespace detrace::tracer {
namespace {

// A column-major matrix of `rows` x `cols` elements with leading dimension `ld`, `batch` matrices
// `stride` elements apart.
OperandSpec columnMajor(int32_t slot, const char* name, db::OperandRole role, db::DType dtype,
                        uint64_t address, int64_t rows, int64_t cols, int64_t ld, int32_t batch,
                        int64_t stride) {
  OperandSpec s;
  s.slot = slot;
  s.name = name;
  s.role = role;
  s.dtype = dtype;
  s.address = address;
  const int64_t esize = db::dtypeSize(dtype);
  if (esize == 0 || rows <= 0 || cols <= 0 || ld < rows || address == 0) return s;
  batch = batch < 1 ? 1 : batch;
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

std::vector<OperandSpec> gemmOperandSpecs(const db::Gemm& g, RowDigests rows) {
  using db::OperandRole;
  std::vector<OperandSpec> out;
  out.reserve(4);
  // op(A) is m x k: stored m x k (N) or k x m (T). op(B) is k x n: stored k x n (N) or n x k (T).
  int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  out.push_back(columnMajor(0, "A", OperandRole::kInput, g.a_dtype, static_cast<uint64_t>(g.a_addr),
                            a_rows, a_cols, g.lda, g.batch_count, g.stride_a));
  out.push_back(columnMajor(1, "B", OperandRole::kInput, g.b_dtype, static_cast<uint64_t>(g.b_addr),
                            b_rows, b_cols, g.ldb, g.batch_count, g.stride_b));
  if (g.c_addr != 0 && g.c_addr != g.d_addr) {
    out.push_back(columnMajor(2, "C", OperandRole::kInput, g.c_dtype, static_cast<uint64_t>(g.c_addr),
                              g.m, g.n, g.ldc, g.batch_count, g.stride_c));
  }
  OperandSpec d = columnMajor(3, "D", OperandRole::kOutput, g.d_dtype,
                              static_cast<uint64_t>(g.d_addr), g.m, g.n, g.ldd, g.batch_count,
                              g.stride_d);
  out.push_back(std::move(d));
  if (rows == RowDigests::kTokens) {
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
    default: break;
  }
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
