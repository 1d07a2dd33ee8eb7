// The kernel-selection table: for the same op and shape, what ran in run A and what ran in run B
// (kernel, cuBLASLt algorithm, NCCL algorithm/protocol/channels), how often, grouped by op kind.
// Rows come straight from replay::RunDiff::selection_changes.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "detrace/replay/diff.h"

namespace detrace::gui {

class SelectionModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kKind, kRanInA, kRanInB, kCount, kColumnCount };

  using QAbstractTableModel::QAbstractTableModel;
  void setChanges(std::vector<replay::SelectionChange> changes);
  const std::vector<replay::SelectionChange>& changes() const { return changes_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<replay::SelectionChange> changes_;  // grouped by kind, most frequent first
};

}  // namespace detrace::gui
