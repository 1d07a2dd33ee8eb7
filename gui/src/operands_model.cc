#include "operands_model.h"

#include <QBrush>

#include "status_style.h"

namespace detrace::gui {

void OperandsModel::setPair(std::shared_ptr<const TensorPair> pair) {
  beginResetModel();
  pair_ = std::move(pair);
  endResetModel();
}

const OperandPair* OperandsModel::operand(int row) const {
  if (!pair_ || row < 0 || row >= static_cast<int>(pair_->operands.size())) return nullptr;
  return &pair_->operands[static_cast<size_t>(row)];
}

int OperandsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !pair_ ? 0 : static_cast<int>(pair_->operands.size());
}

int OperandsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant OperandsModel::display(const OperandPair& o, int column) const {
  switch (column) {
    case kSlot:
      return o.slot;
    case kName:
      return o.name;
    case kRole:
      return QString(db::operandRoleName(o.role));
    case kDType:
      return QString(db::dtypeName(o.dtype));
    case kShapeA:
      return o.present_a ? o.shape_a : QString("—");
    case kShapeB:
      return o.present_b ? o.shape_b : QString("—");
    case kDigest:
      return !o.digest_equal   ? QString("—")
             : *o.digest_equal ? QString("equal")
                               : QString("differ");
    case kRows:
      return o.rows.empty() ? QString("—")
                            : QString("%1 of %2 differ").arg(o.rows_differing).arg(o.rows.size());
    case kUlp:
      return o.ulp ? QString("max %1 ULP, %2 elements differ")
                         .arg(o.ulp->max_ulp)
                         .arg(o.ulp->differing)
                   : QString("not captured");
    default:
      return {};
  }
}

QVariant OperandsModel::data(const QModelIndex& index, int role) const {
  const OperandPair* o = index.isValid() ? operand(index.row()) : nullptr;
  if (o == nullptr || index.column() >= kColumnCount) return {};
  if (role == Qt::DisplayRole) return display(*o, index.column());
  if (role == Qt::ToolTipRole && index.column() == kUlp && !o->ulp) return o->capture_note;
  if (role == Qt::BackgroundRole && operandDiffers(*o, pair_->by_content)) {
    return QBrush(statusColor(replay::PairStatus::kNondeterministic));
  }
  return {};
}

QVariant OperandsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kNames[kColumnCount] = {"Slot",        "Name",          "Role",
                                                   "Dtype",       "Shape A",       "Shape B",
                                                   "Fingerprint", "Rows (tokens)", "Elements"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

}  // namespace detrace::gui
