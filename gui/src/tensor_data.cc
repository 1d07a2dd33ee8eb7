#include "tensor_data.h"

#include <map>

namespace detrace::gui {
namespace {

QString shapeText(const db::Operand& o) {
  QStringList dims;
  for (int64_t d : o.shape) dims << QString::number(d);
  return dims.isEmpty() ? QString("%1 rows x %2 B").arg(o.rows).arg(o.row_bytes)
                        : "[" + dims.join(", ") + "]";
}

Result<std::vector<db::Operand>> operandsOf(const db::Run& run, int32_t rank, int64_t seq,
                                            std::unique_ptr<db::TraceReader>& reader) {
  if (seq < 0) return std::vector<db::Operand>{};
  DETRACE_ASSIGN_OR_RETURN(reader, run.openRank(rank));
  return reader->operands(seq);
}

// ULP view for an operand both runs captured.
void compareBytes(db::TraceReader& ra, const db::Operand& a, db::TraceReader& rb,
                  const db::Operand& b, OperandPair& out) {
  if (a.capture_bytes == 0 || b.capture_bytes == 0) {
    out.capture_note =
        "the operand's bytes were not captured in both runs (record with --capture full to "
        "see per-element differences)";
    return;
  }
  auto bytes_a = ra.captureBytes(a.id);
  auto bytes_b = rb.captureBytes(b.id);
  if (!bytes_a.isOk() || !bytes_b.isOk()) {
    out.capture_note =
        QString::fromStdString((bytes_a.isOk() ? bytes_b.status() : bytes_a.status()).message());
    return;
  }
  auto diff = replay::ulpDiff(*bytes_a, *bytes_b, a.dtype, a.rows);
  if (!diff.isOk()) {
    out.capture_note = QString::fromStdString(diff.status().message());
    return;
  }
  out.histogram = replay::ulpHistogram(*diff);
  out.ulp = std::move(*diff);
}

}  // namespace

bool operandDiffers(const OperandPair& o, bool by_content) {
  return o.rows_differing > 0 || (o.ulp && o.ulp->differing > 0) ||
         (!by_content && o.digest_equal && !*o.digest_equal);
}

Result<std::shared_ptr<const TensorPair>> loadTensorPair(const db::Run& run_a, const db::Run& run_b,
                                                         int32_t rank, int64_t seq_a, int64_t seq_b,
                                                         bool by_content) {
  auto out = std::make_shared<TensorPair>();
  out->rank = rank;
  out->seq_a = seq_a;
  out->seq_b = seq_b;
  out->by_content = by_content;
  std::unique_ptr<db::TraceReader> ra, rb;
  DETRACE_ASSIGN_OR_RETURN(auto ops_a, operandsOf(run_a, rank, seq_a, ra));
  DETRACE_ASSIGN_OR_RETURN(auto ops_b, operandsOf(run_b, rank, seq_b, rb));
  std::map<int32_t, std::pair<const db::Operand*, const db::Operand*>> by_slot;
  for (const db::Operand& o : ops_a) by_slot[o.slot].first = &o;
  for (const db::Operand& o : ops_b) by_slot[o.slot].second = &o;
  for (auto [slot, pair] : by_slot) {
    auto [a, b] = pair;
    const db::Operand& any = a ? *a : *b;
    OperandPair p;
    p.slot = slot;
    p.name = QString::fromStdString((a ? ra : rb)->str(any.name));
    p.role = any.role;
    p.dtype = any.dtype;
    p.present_a = a != nullptr;
    p.present_b = b != nullptr;
    if (a) {
      p.shape_a = shapeText(*a);
      p.rows_a = a->rows;
    }
    if (b) {
      p.shape_b = shapeText(*b);
      p.rows_b = b->rows;
    }
    if (a && b) {
      if (a->has_digest && b->has_digest) p.digest_equal = a->digest == b->digest;
      p.rows = replay::compareRowDigests(*a, *b, by_content);
      for (replay::RowState s : p.rows) p.rows_differing += s == replay::RowState::kDiffer;
      compareBytes(*ra, *a, *rb, *b, p);
    } else {
      p.capture_note = QString("the operand exists only in run %1").arg(a ? "A" : "B");
    }
    out->operands.push_back(std::move(p));
  }
  return std::shared_ptr<const TensorPair>(std::move(out));
}

}  // namespace detrace::gui
