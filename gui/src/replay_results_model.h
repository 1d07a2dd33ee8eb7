// The Replay tab's results: one row per implementation.
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "replay_backend.h"

namespace detrace::gui {

class ReplayResultsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kImpl,
    kDevice,
    kResult,
    kRuns,
    kDistinct,
    kMatches,
    kToRecorded,
    kToReference,
    kBatchRows,
    kColumnCount
  };

  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<ReplayRow> rows);
  const std::vector<ReplayRow>& rows() const { return rows_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<ReplayRow> rows_;
};

}  // namespace detrace::gui
