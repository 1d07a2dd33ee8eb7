// The operands of one aligned pair, compared: per-row fingerprints (which rows, i.e. tokens,
// differ) for every digested operand, and per-element ULP differences where both runs captured the
// bytes. Loaded off the UI thread with replay/operand_diff.h.
#pragma once

#include <QString>
#include <memory>
#include <optional>
#include <vector>

#include "detrace/replay/operand_diff.h"

#include "analysis.h"

namespace detrace::gui {

struct OperandPair {
  int32_t slot = 0;
  QString name;  // "A", "B", "D", "bias", "aux", "A_scale", "send", ...
  db::OperandRole role = db::OperandRole::kInput;
  db::DType dtype = db::DType::kUnknown;
  QString shape_a, shape_b;
  int64_t rows_a = 0, rows_b = 0;
  bool present_a = false, present_b = false;
  std::optional<bool> digest_equal;    // whole-operand fingerprints, if both have one
  std::vector<replay::RowState> rows;  // per row of A (by content in batch-size mode)
  int64_t rows_differing = 0;
  std::optional<replay::UlpDiff> ulp;  // both captured
  std::vector<int64_t> histogram;      // replay::ulpHistogram(*ulp)
  QString capture_note;                // why there is no ULP view
};

struct TensorPair {
  int32_t rank = -1;
  int64_t seq_a = -1, seq_b = -1;
  bool by_content = false;  // batch-size mode: rows compared by content
  std::vector<OperandPair> operands;
};

// Whether the operand differs between the runs: rows, elements, or (comparing by position) the
// whole fingerprint. By content (batch-size mode) whole fingerprints differ by construction.
bool operandDiffers(const OperandPair& o, bool by_content);

// Compares the operands of event `seq_a` of run A and `seq_b` of run B on `rank` (either -1).
Result<std::shared_ptr<const TensorPair>> loadTensorPair(const db::Run& a, const db::Run& b,
                                                         int32_t rank, int64_t seq_a, int64_t seq_b,
                                                         bool by_content);

}  // namespace detrace::gui
