// RankOps: one rank's events reduced to what comparing runs needs: for every event an alignment
// key (what the op *is*), a choice signature (which kernel or algorithm *ran* it), and fingerprints
// of its inputs and outputs where the recorder took them. Loaded in one pass over the trace.
#pragma once

#include <cstdint>
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
};

struct OpRecord {
  int64_t seq = -1;
  db::EventKind kind = db::EventKind::kOther;
  int64_t name = -1;    // strings id (kernel name, API name)
  int64_t parent = -1;  // seq of the library op that launched it
  uint64_t key = 0;     // alignment key: kind + kernel name family, or op + shape class
  uint64_t choice = 0;  // the kernel / cuBLASLt algorithm / NCCL algo+proto+channels that ran
  bool anchor = false;  // a library op (GEMM, collective): the alignment's fixed points
  int32_t detail = -1;  // index into RankOps::gemms or ::collectives
  bool has_inputs = false, has_outputs = false;
  uint64_t inputs = 0, outputs = 0;  // combined digests of the input and output operands
  int32_t operands_begin = 0, operands_end = 0;  // its operands in RankOps::operands
};

struct RankOps {
  int32_t rank = -1;
  std::vector<OpRecord> ops;  // in sequence order
  std::vector<std::pair<int64_t, db::Gemm>> gemms;
  std::vector<std::pair<int64_t, db::Collective>> collectives;
  std::vector<std::string> names;  // names[i] = the reader's string i (kernel names, algos, ...)
  std::vector<db::Operand> operands;  // all operands (fingerprints, no captured bytes), by seq

  const std::string& name(int64_t id) const;
};

// The kernel-name family used to align kernels: the name without its parameter list and digits,
// so "gemm_128x256_kernel<bf16, 4>" and "gemm_64x128_kernel<bf16, 8>" are one family (aligned
// together, then told apart by their choice signature), while template arguments that name a
// functor keep PyTorch's elementwise kernels (silu vs add) apart.
std::string kernelFamily(const std::string& name);

Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options = {});

}  // namespace detrace::replay
