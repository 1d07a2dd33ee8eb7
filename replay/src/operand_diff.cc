#include "detrace/replay/operand_diff.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_set>

#include "detrace/replay/replay_metrics.h"

namespace detrace::replay {
namespace {

uint64_t loadBits(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  std::memcpy(&v, p, static_cast<size_t>(bytes));  // little-endian hosts only (x86-64, aarch64)
  return v;
}

}  // namespace

std::vector<RowState> compareRowDigests(const db::Operand& a, const db::Operand& b,
                                        bool by_content) {
  std::vector<RowState> out(a.row_digests.size(), RowState::kMissing);
  if (by_content) {
    std::unordered_set<uint64_t> rows(b.row_digests.begin(), b.row_digests.end());
    for (size_t i = 0; i < out.size(); ++i) {
      if (!rows.empty())
        out[i] = rows.count(a.row_digests[i]) ? RowState::kEqual : RowState::kDiffer;
    }
    return out;
  }
  for (size_t i = 0; i < out.size() && i < b.row_digests.size(); ++i) {
    out[i] = a.row_digests[i] == b.row_digests[i] ? RowState::kEqual : RowState::kDiffer;
  }
  return out;
}

Result<UlpDiff> ulpDiff(std::span<const uint8_t> a, std::span<const uint8_t> b, db::DType dtype,
                        int64_t rows) {
  const int size = db::dtypeSize(dtype);
  if (!isFloatDType(dtype) || dtype == db::DType::kF64) {
    return makeError(ErrorCode::kInvalidArgument,
                     "ULP differences need an fp32, fp16 or bf16 operand, not {}",
                     db::dtypeName(dtype));
  }
  if (a.size() != b.size()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "the captured copies differ in size ({} and {} bytes)", a.size(), b.size());
  }
  UlpDiff out;
  int64_t elements = static_cast<int64_t>(a.size()) / size;
  out.rows = rows > 0 && elements % rows == 0 ? rows : 1;
  out.cols = out.rows > 0 ? elements / out.rows : 0;
  out.ulps.resize(static_cast<size_t>(elements));
  for (int64_t i = 0; i < elements; ++i) {
    uint64_t d = ulpDistance(dtype, loadBits(a.data() + i * size, size),
                             loadBits(b.data() + i * size, size));
    out.ulps[static_cast<size_t>(i)] = d;
    out.differing += d > 0;
    out.max_ulp = std::max(out.max_ulp, d);
  }
  return out;
}

std::vector<int64_t> ulpHistogram(const UlpDiff& diff) {
  std::vector<int64_t> buckets(65, 0);
  size_t used = 1;
  for (uint64_t u : diff.ulps) {
    size_t k = u == 0 ? 0 : static_cast<size_t>(std::bit_width(u));
    ++buckets[k];
    used = std::max(used, k + 1);
  }
  buckets.resize(used);
  return buckets;
}

}  // namespace detrace::replay
