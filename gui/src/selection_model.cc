#include "selection_model.h"

#include <algorithm>

namespace detrace::gui {

void SelectionModel::setChanges(std::vector<replay::SelectionChange> changes) {
  beginResetModel();
  changes_ = std::move(changes);
  std::stable_sort(changes_.begin(), changes_.end(), [](const auto& x, const auto& y) {
    if (x.kind != y.kind)
      return static_cast<int>(x.kind) > static_cast<int>(y.kind);  // GEMM, collective, kernel
    return x.count > y.count;
  });
  endResetModel();
}

int SelectionModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(changes_.size());
}

int SelectionModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant SelectionModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const replay::SelectionChange& c = changes_[static_cast<size_t>(index.row())];
  if (role == Qt::TextAlignmentRole && index.column() == kCount)
    return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && (index.column() == kRanInA || index.column() == kRanInB)) {
    return QString::fromStdString(index.column() == kRanInA ? c.a : c.b);
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case kKind:
      return QString(db::eventKindName(c.kind));
    case kRanInA:
      return QString::fromStdString(replay::shortKernelName(c.a, 200));
    case kRanInB:
      return QString::fromStdString(replay::shortKernelName(c.b, 200));
    case kCount:
      return static_cast<qlonglong>(c.count);
    default:
      return {};
  }
}

QVariant SelectionModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kNames[kColumnCount] = {"Op kind", "Ran in A", "Ran in B", "Times"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

}  // namespace detrace::gui
