// The operands of the selected pair: slot, role, dtype, shapes, whether the whole-operand
// fingerprints match, how many rows differ, and the largest ULP difference where captured.
#pragma once

#include <QAbstractTableModel>
#include <memory>

#include "tensor_data.h"

namespace detrace::gui {

class OperandsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kSlot, kName, kRole, kDType, kShapeA, kShapeB, kDigest, kRows, kUlp, kColumnCount };

  using QAbstractTableModel::QAbstractTableModel;
  void setPair(std::shared_ptr<const TensorPair> pair);
  const std::shared_ptr<const TensorPair>& pair() const { return pair_; }
  const OperandPair* operand(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  QVariant display(const OperandPair& o, int column) const;
  std::shared_ptr<const TensorPair> pair_;
};

}  // namespace detrace::gui
