// Comparing one operand of an op in two runs: which rows (tokens) differ, from the per-row
// fingerprints every digested operand has, and, where the recorder captured the bytes of both
// copies, how far apart each element is in units in the last place (ULPs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/records.h"

namespace detrace::replay {

enum class RowState : uint8_t {
  kEqual,    // the row's fingerprint matches
  kDiffer,   // it does not
  kMissing,  // the other side has no such row (or no row fingerprints)
};

// One state per row of `a`. By position (row i of A against row i of B), or, with `by_content`
// (batch-size mode, where the request's rows sit at other positions in the larger run), whether
// row i of A appears anywhere among B's rows.
std::vector<RowState> compareRowDigests(const db::Operand& a, const db::Operand& b,
                                        bool by_content);

struct UlpDiff {
  int64_t rows = 0, cols = 0;  // the element grid: rows x elements per row
  std::vector<uint64_t> ulps;  // rows * cols, row-major
  int64_t differing = 0;       // elements with ulps > 0
  uint64_t max_ulp = 0;
};

// Element-wise distance between two captured copies of an operand of `dtype` (fp32, fp16, bf16)
// with `rows` rows (0 = one row), each element by replay_metrics.h's ulpDistance (a NaN against
// a non-NaN is UINT64_MAX). Errors for other dtypes or copies of different sizes.
Result<UlpDiff> ulpDiff(std::span<const uint8_t> a, std::span<const uint8_t> b, db::DType dtype,
                        int64_t rows);

// Histogram of an UlpDiff: bucket 0 counts equal elements, bucket k >= 1 those with
// 2^(k-1) <= ulps < 2^k.
std::vector<int64_t> ulpHistogram(const UlpDiff& diff);

}  // namespace detrace::replay
