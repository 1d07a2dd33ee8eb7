// RankOps: one rank's events reduced to what comparing runs needs: for every event an alignment
// key (what the op *is*), a choice signature (which kernel or algorithm *ran* it), and fingerprints
// of its inputs and outputs where the recorder took them.
//
// Memory: a diff holds two of these per rank at a time, so they are kept compact. An event costs
// one 24-byte OpRecord; only library ops (GEMMs, collectives) and fingerprinted ops carry an
// OpExtra; a kernel's choice comes from a per-name table. Per-row digests, which only batch-size
// mode compares, are loaded only when asked for (KeyOptions::rows), into one flat array.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/reader.h"

namespace detrace::replay {

// Which GEMM dimension holds the tokens (it differs between batch sizes). cuBLAS is column-major,
// so PyTorch's y = x W^T puts the tokens in n; row-major callers of cuBLASLt put them in m.
enum class BatchDim { kNone, kM, kN };

struct KeyOptions {
  // Batch-size mode: GEMM keys leave out the token dimension and collective keys their count, so
  // bs=1 and bs=64 runs align op for op.
  BatchDim batch_dim = BatchDim::kNone;
  // Load the operands' per-row digests (batch-size mode compares rows).
  bool rows = false;
};

// One event. Its sequence number is its index in RankOps::ops (sequence numbers are dense).
struct OpRecord {
  uint64_t key = 0;     // alignment key: kind + kernel name family, or op + shape class
  int32_t name = 0;     // strings id (kernel name, API or marker text); 0 = none
  int32_t parent = -1;  // seq of the library op that launched it
  int32_t extra = -1;   // index into RankOps::extras (library ops and fingerprinted ops), or -1
  uint8_t kind_ = static_cast<uint8_t>(db::EventKind::kOther);  // a db::EventKind, in one byte
  bool anchor = false;  // a library op (GEMM, collective): the alignment's fixed points

  db::EventKind kind() const { return static_cast<db::EventKind>(kind_); }
};
static_assert(sizeof(OpRecord) == 24, "one OpRecord per event: keep it small");

// What only library ops and fingerprinted ops have.
struct OpExtra {
  uint64_t choice = 0;  // library ops: the cuBLASLt algorithm / NCCL algo+proto+channels
  uint64_t inputs = 0, outputs = 0;  // combined digests of the input and output operands
  int32_t detail = -1;  // index into RankOps::gemms or ::collectives
  int32_t rows_begin = 0, rows_end = 0;  // its operands in RankOps::row_operands (KeyOptions::rows)
  bool has_inputs = false, has_outputs = false;
};

// The GEMM fields that keys, choices and reports use.
struct GemmInfo {
  int64_t m = 0, n = 0, k = 0;
  int32_t api = 0;  // strings id
  int32_t batch_count = 1;
  int32_t algo_id = -1, tile = -1, split_k = -1, reduction_scheme = -1, stages = -1, swizzle = -1,
          custom_option = -1;
  int8_t trans_a = 0, trans_b = 0;  // cublasOperation_t: 0 N, 1 T, 2 C
  db::DType a_dtype = db::DType::kUnknown, b_dtype = db::DType::kUnknown;
  db::DType c_dtype = db::DType::kUnknown, d_dtype = db::DType::kUnknown;
};

// An operand's per-row digests (batch-size mode): row_digests[begin, end) of its RankOps.
struct RowOperand {
  int32_t slot = 0;
  db::OperandRole role = db::OperandRole::kInput;
  int64_t begin = 0, end = 0;
};

// An NVTX range start or end, an instant or a step marker (db::Marker), in sequence order.
struct MarkerRecord {
  int64_t seq = -1;
  db::MarkerKind kind = db::MarkerKind::kInstant;
  int64_t domain = -1;  // strings id, -1 unset
  int64_t value = -1;   // range id (ranges), step number (step markers), -1 unset
  int32_t name = 0;     // strings id of its text
};

struct RankOps {
  int32_t rank = -1;
  std::vector<OpRecord> ops;  // ops[seq]
  std::vector<OpExtra> extras;
  std::vector<GemmInfo> gemms;
  std::vector<db::Collective> collectives;
  std::vector<std::string> names;      // names[i] = the reader's string i (kernel names, algos, ...)
  std::vector<uint64_t> name_choices;  // by string id: the choice signature of a kernel of that name
  std::vector<RowOperand> row_operands;  // by op, in slot order (KeyOptions::rows only)
  std::vector<uint64_t> row_digests;
  std::vector<MarkerRecord> markers;
  int64_t gemm_count = 0, collective_count = 0;
  bool fingerprinted = false;  // some operand has a digest or row digests

  const std::string& name(int64_t id) const;
  int64_t size() const { return static_cast<int64_t>(ops.size()); }
  // The op at `seq`, or nullptr if out of range.
  const OpRecord* at(int64_t seq) const;
  // Its extra record, or nullptr.
  const OpExtra* extra(const OpRecord& op) const;
  // What ran it: a library op's algorithm signature, else its name's.
  uint64_t choice(const OpRecord& op) const;
  const GemmInfo* gemm(const OpRecord& op) const;
  const db::Collective* collective(const OpRecord& op) const;
  std::span<const uint64_t> rows(const RowOperand& o) const;
};

// The kernel-name family used to align kernels: the name without its parameter list and digits,
// so "gemm_128x256_kernel<bf16, 4>" and "gemm_64x128_kernel<bf16, 8>" are one family (aligned
// together, then told apart by their choice signature), while template arguments that name a
// functor keep PyTorch's elementwise kernels (silu vs add) apart.
std::string kernelFamily(const std::string& name);

Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options = {});

// For two loads running at once (diffRuns loads both runs' ranks in parallel): the largest
// transient of a load, every operand of the trace, is read under `heavy`, so the two loads take
// turns with it; one load reads it first and the other last, so they rarely wait.
struct LoadSchedule {
  std::mutex* heavy = nullptr;
  bool operands_last = false;
};
Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options,
                            const LoadSchedule& schedule);

// Where an event sits in its program: the texts of the NVTX ranges (and the last step marker)
// open at `seq`, outermost first, e.g. {"step 3", "layer 5"}; empty if the trace has none.
// Ranges are matched by (domain, range id) when an end carries an id that is open, else an end
// closes the innermost open range (push/pop).
std::vector<std::string> positionAt(const RankOps& ops, int64_t seq);

// A landmark that needs no markers: "GEMM 6 of 40", "collective 2 of 8", or for other events
// "kernel after GEMM 6 of 40" / "kernel before the first GEMM".
std::string landmarkAt(const RankOps& ops, int64_t seq);

}  // namespace detrace::replay
