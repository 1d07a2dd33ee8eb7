// Which bytes of a library op's operands to fingerprint: the whole extent of each operand and its
// rows (one row = one token's vector), derived from the op's recorded layout. Plain C++ (no CUDA),
// so CPU tests check the layout rules.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "detrace/db/records.h"
#include "detrace/tracer/capture_policy.h"

namespace detrace::tracer {

// An operand's stored shape, up to three dimensions held inline: a GEMM's specs are built for every
// fingerprinted GEMM on the program's thread, and a vector each cost it an allocation.
class OperandShape {
 public:
  static constexpr size_t kMaxDims = 3;
  OperandShape() = default;
  // Dimensions past kMaxDims are not kept (no operand here has more).
  OperandShape(std::initializer_list<int64_t> dims)
      : n_(static_cast<uint8_t>(std::min(dims.size(), kMaxDims))) {
    std::copy_n(dims.begin(), n_, dims_.begin());
  }
  size_t size() const { return n_; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  std::vector<int64_t> toVector() const { return {dims_.begin(), dims_.begin() + n_}; }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  uint8_t n_ = 0;
};

// How a cuBLASLt matrix is stored (CUBLASLT_MATRIX_LAYOUT_ORDER, _BATCH_MODE).
enum class MatrixOrder : uint8_t {
  kColumn,     // column-major, `ld` elements from one column to the next (cuBLAS's only layout)
  kRow,        // row-major, `ld` elements from one row to the next
  kUnreadable  // a tiled order (COL32, ...) or an array of pointers: not one strided extent
};

// The layouts of a GEMM's A, B, C and D, and whether C is read at all.
struct GemmLayouts {
  std::array<MatrixOrder, 4> order{MatrixOrder::kColumn, MatrixOrder::kColumn,
                                   MatrixOrder::kColumn, MatrixOrder::kColumn};
  bool c_unread = false;  // beta is known to be 0
};

struct OperandSpec {
  int32_t slot = 0;
  std::string name;  // "A", "B", "C", "D", "send", "recv"
  db::OperandRole role = db::OperandRole::kInput;
  db::DType dtype = db::DType::kUnknown;
  OperandShape shape;  // as stored: {columns, rows-per-column} for column-major GEMM operands
  uint64_t address = 0;
  uint64_t bytes = 0;          // whole extent, first to last byte
  int64_t rows = 0;            // per-row digests: count (0 = none), bytes and stride of each
  int64_t row_bytes = 0;
  int64_t row_stride = 0;
};

// cuBLAS/cuBLASLt operands (column-major): A and B (and C wherever it is read: beta not known to
// be 0, also where C is D and the call accumulates into it) as inputs, D as the output. A "row" is one stored column: contiguous, ld elements apart. In PyTorch's
// y = x W^T, cuBLAS computes y^T = W x^T, so the columns of B and D are tokens and those of A are
// weight rows. Batched GEMMs get whole-extent digests, and rows only when batches are packed.
// With RowDigests::kTokens, a transposed B (whose stored columns run along k) and an A that is
// not batched with a matrix of its own per batch (a linear layer's weight, whose stored columns
// are weight rows) get no rows: their whole digest alone. A batched A (eager attention's keys or
// values) keeps its rows, which are tokens.
//
// cuBLASLt describes each matrix with a layout of its own (`layouts`; classic cuBLAS has only the
// default): a row-major matrix is stored as rows of `ld` elements, and rows are then its stored
// lines (under kTokens: D's and an untransposed A's, the tokens of a row-major caller's x W).
// Matrices in a tiled order (COL32 and the like) or given as arrays of pointers get no digests:
// their bytes are not one strided extent. Nor does C when beta is known to be 0 (cuBLASLt does
// not read it, and the caller may pass any pointer).
std::vector<OperandSpec> gemmOperandSpecs(const db::Gemm& gemm, RowDigests rows,
                                          const GemmLayouts& layouts = {});

// NCCL operands: the send and receive buffers, with rows of `row_bytes` (the hidden width of the
// last GEMM output on this thread) when it divides the buffer; 0 = whole buffers only.
// A broadcast's send buffer and a reduce's receive buffer are left out on ranks other than the
// root (where the rank is known): NCCL ignores them there, and they may point anywhere.
std::vector<OperandSpec> collectiveOperandSpecs(const db::Collective& c, int64_t row_bytes);

// Whether the op's call may change what its inputs hold: an operand is both read and written
// (kInOut), or an output's extent overlaps an input's. When it cannot, every operand may be
// fingerprinted after the call, in one enqueue (fingerprintAllAfter).
bool outputsMayChangeInputs(const std::vector<OperandSpec>& specs);

}  // namespace detrace::tracer
