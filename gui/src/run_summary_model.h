// One row per rank of every open run: the facts `detrace info` prints. Thin: it only holds value
// snapshots that a worker produced (setRuns replaces them inside a model reset).
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "detrace/replay/summary.h"

namespace detrace::gui {

class RunSummaryModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kRun,
    kRank,
    kGpu,
    kEvents,
    kKernels,
    kGemms,
    kCollectives,
    kSpan,
    kDropped,
    kColumnCount
  };

  using QAbstractTableModel::QAbstractTableModel;
  void setRuns(std::vector<replay::RunSummary> runs);
  const std::vector<replay::RunSummary>& runs() const { return runs_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<replay::RunSummary> runs_;
  std::vector<std::pair<size_t, size_t>> rows_;  // (run, rank) per row
};

}  // namespace detrace::gui
