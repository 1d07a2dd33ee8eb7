#include "replay_results_model.h"

#include <QBrush>
#include <QColor>

namespace detrace::gui {

void ReplayResultsModel::setRows(std::vector<ReplayRow> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

int ReplayResultsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int ReplayResultsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant ReplayResultsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const ReplayRow& r = rows_[static_cast<size_t>(index.row())];
  if (role == Qt::ToolTipRole)
    return r.description + (r.control ? " (planted defect: a control)" : "");
  if (role == Qt::ForegroundRole && r.control) return QBrush(QColor(130, 130, 130));
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case kImpl:
      return r.impl + (r.control ? " (control)" : "");
    case kDevice:
      return r.device;
    case kResult:
      return r.result;
    case kRuns:
      return r.runs;
    case kDistinct:
      return r.distinct;
    case kMatches:
      return r.matches_recorded;
    case kToRecorded:
      return r.to_recorded;
    case kToReference:
      return r.to_reference;
    case kBatchRows:
      return r.batch_rows;
    default:
      return {};
  }
}

QVariant ReplayResultsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kNames[kColumnCount] = {"Implementation",
                                                   "Device",
                                                   "Result",
                                                   "Runs",
                                                   "Distinct",
                                                   "Matches recorded",
                                                   "vs recorded",
                                                   "vs fp64 reference",
                                                   "Request rows across batch sizes"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

}  // namespace detrace::gui
