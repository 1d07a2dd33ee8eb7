// Run groups: with many runs, which are bit-identical to which (replay::groupRuns's classes), and
// for each class after the first where it parts from the largest class.
#pragma once

#include <QAbstractTableModel>
#include <memory>

#include "analysis.h"

namespace detrace::gui {

class GroupsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kClass, kRuns, kCount, kVerdict, kColumnCount };

  using QAbstractTableModel::QAbstractTableModel;
  void setAnalysis(std::shared_ptr<const Analysis> analysis);
  // "3 distinct behaviour(s) over 4 runs"
  QString summary() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  struct Row {
    QStringList runs;
    QString verdict;
  };
  std::vector<Row> rows_;
  int runs_ = 0;
};

}  // namespace detrace::gui
