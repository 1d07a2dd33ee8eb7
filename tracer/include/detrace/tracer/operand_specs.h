// Which bytes of a library op's operands to fingerprint: the whole extent of each operand and its
// rows (one row = one token's vector), derived from the op's recorded layout. Plain C++ (no CUDA),
// so CPU tests check the layout rules.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
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

// A GEMM's operand slots (operands.slot): A, B, C and D, then the operands a cuBLASLt descriptor
// adds (its epilogue's bias vector and auxiliary matrix, its FP8 scales and amax outputs). Traces
// and the diff's alignment of operands depend on these numbers: new ones go at the end.
enum GemmSlot : int32_t {
  kSlotA = 0, kSlotB, kSlotC, kSlotD,
  kSlotBias, kSlotAux,
  kSlotScaleA, kSlotScaleB, kSlotScaleC, kSlotScaleD, kSlotAmaxD, kSlotScaleAux, kSlotAmaxAux,
};

// cublasLtEpilogue_t's values (cublasLt.h), here so that CPU tests need no CUDA header;
// cublas_wrappers.cc checks them against the header it is built with.
enum class LtEpilogue : uint32_t {
  kDefault = 1, kRelu = 2, kReluAux = 130, kBias = 4, kReluBias = 6, kReluAuxBias = 134,
  kDRelu = 136, kDReluBGrad = 152, kGelu = 32, kGeluAux = 160, kGeluBias = 36,
  kGeluAuxBias = 164, kDGelu = 192, kDGeluBGrad = 208, kBGradA = 256, kBGradB = 512,
};

// What an epilogue does with the descriptor's bias pointer and aux pointer (cublasLt.h's
// cublasLtEpilogue_t and EPILOGUE_AUX_POINTER): BIAS adds a vector of D's rows; DRELU_BGRAD,
// DGELU_BGRAD and BGRADA write a gradient of D's rows, BGRADB one of its columns; the AUX forward
// epilogues write the activation's input (ReLU's as a bit mask) and the backward ones read it.
enum class BiasUse : uint8_t { kNone, kAdded, kGradRows, kGradCols };  // input m; output m or n
enum class AuxUse : uint8_t { kNone, kWritten, kRead };
struct EpilogueUse {
  BiasUse bias = BiasUse::kNone;
  AuxUse aux = AuxUse::kNone;
  bool mask = false;  // the aux is ReLU's bit mask
};
// Epilogues the tracer does not know (newer than it) use neither.
EpilogueUse epilogueUse(uint32_t epilogue);

// How cuBLASLt reads a scale pointer (cublasLtMatmulMatrixScale_t): one float for the whole
// matrix (SCALAR_32F), a float per row of op(A) or column of op(B) (OUTER_VEC_32F), or any other
// layout (blocks of 16, 32 or 128 elements, 128x128 tiles, a mode newer than the tracer), whose
// extent is not derived here: such scales get no digest.
enum class LtScaleMode : uint8_t { kScalar, kOuterVector, kOther };

struct LtScale {
  uint64_t address = 0;  // 0: not set (the scale is 1)
  LtScaleMode mode = LtScaleMode::kScalar;
};

// The operands a cuBLASLt matmul descriptor adds to A, B, C and D (cublasLtMatmulDescAttributes_t,
// whose names the comments give). Addresses are 0 where unset; a dtype is nullopt where the
// descriptor leaves it to cuBLASLt (-1), kUnknown where it names one detrace does not know.
struct LtOperands {
  uint32_t epilogue = static_cast<uint32_t>(LtEpilogue::kDefault);  // EPILOGUE
  uint64_t bias = 0;                     // BIAS_POINTER: bias, or bias gradient (BGRAD epilogues)
  std::optional<db::DType> bias_dtype;   // BIAS_DATA_TYPE
  int64_t bias_stride = 0;               // BIAS_BATCH_STRIDE, elements (0: one vector for all)
  uint64_t aux = 0;                      // EPILOGUE_AUX_POINTER
  std::optional<db::DType> aux_dtype;    // EPILOGUE_AUX_DATA_TYPE
  int64_t aux_ld = 0;                    // EPILOGUE_AUX_LD, elements (bits for ReLU's mask)
  int64_t aux_stride = 0;                // EPILOGUE_AUX_BATCH_STRIDE, elements (bits for the mask)
  bool imma = false;                     // COMPUTE_TYPE is CUBLAS_COMPUTE_32I(_PEDANTIC)
  db::DType scale_type = db::DType::kF32;  // SCALE_TYPE (alpha's and beta's)
  // A_, B_, C_, D_ and EPILOGUE_AUX_ SCALE_POINTER with their SCALE_MODE, in that order.
  std::array<LtScale, 5> scales{};
  uint64_t amax_d = 0;                   // AMAX_D_POINTER
  uint64_t amax_aux = 0;                 // EPILOGUE_AUX_AMAX_POINTER
};

// The layouts of a GEMM's A, B, C and D, whether C is read at all, and for cuBLASLt the
// descriptor's epilogue and scaling operands.
struct GemmLayouts {
  std::array<MatrixOrder, 4> order{MatrixOrder::kColumn, MatrixOrder::kColumn,
                                   MatrixOrder::kColumn, MatrixOrder::kColumn};
  bool c_unread = false;  // beta is known to be 0
  LtOperands lt;          // classic cuBLAS: none
};

struct OperandSpec {
  int32_t slot = 0;
  std::string name;  // "A", "B", "C", "D", "bias", "aux", "A_scale", ..., "send", "recv"
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
//
// After D come the operands of a cuBLASLt descriptor (`layouts.lt`), each where cuBLASLt uses it:
// - "bias": the vector an epilogue with BIAS adds (input, m elements), or the bias gradient one
//   with BGRAD writes (output: m elements, n for BGRADB); per batch where BIAS_BATCH_STRIDE is set.
// - "aux": the matrix of D's shape that RELU_AUX/GELU_AUX write (output) and DRELU/DGELU read
//   (input), EPILOGUE_AUX_LD apart; ReLU's is a bit mask (ld in bits), digested as bytes. It
//   keeps row digests as D does (its columns are D's tokens); it is left out where D is not
//   column-major (the layout of its aux is not documented).
// - "A_scale", "B_scale", "C_scale" (where C is read), "D_scale", "aux_scale" (where the epilogue
//   has an aux): one float each, or A's and B's outer vectors (m and n floats, unbatched GEMMs);
//   "D_amax" and "aux_amax" (where the aux is written): one float each, outputs.
// An operand whose dtype or extent is not documented (an FP8 kernel's default bias or aux type
// where D is fp32 or fp8, block scales) gets no digest and is left out, as tiled matrices are.
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
