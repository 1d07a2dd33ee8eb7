// The tensors tab: the operands of the selected pair (the first divergence at first), a strip of
// their per-row fingerprints (which tokens differ) and, where both runs captured the bytes, a
// heatmap of per-element ULP differences with its histogram.
#pragma once

#include <QWidget>
#include <memory>

#include "operands_model.h"
#include "tensor_plots.h"

class QChart;
class QChartView;
class QLabel;
class QTableView;

namespace detrace::gui {

class TensorView : public QWidget {
  Q_OBJECT

 public:
  explicit TensorView(QWidget* parent = nullptr);
  // The runs to compare; by_content compares rows by content (batch-size mode).
  void setRuns(const db::Run& a, const db::Run& b, bool by_content);
  void clear();
  // Loads the operands of the pair in the background: loaded() when shown (or when they could not
  // be loaded: the title says why).
  void showPair(int32_t rank, int64_t seq_a, int64_t seq_b);
  // No pair to show (runs without a divergence): empties the view, says `why`, then loaded().
  void showNone(const QString& why);
  void selectOperand(int row);

  OperandsModel* model() { return &model_; }
  RowStripWidget* strip() { return strip_; }
  HeatmapWidget* heatmap() { return heatmap_; }
  QChartView* histogram() { return chart_; }
  int currentOperand() const { return current_; }

 signals:
  void loaded();

 private:
  void onLoaded(std::shared_ptr<const TensorPair> pair);
  void replaceChart(QChart* chart);

  OperandsModel model_;
  std::unique_ptr<db::Run> run_a_, run_b_;
  bool by_content_ = false;
  QLabel* title_ = nullptr;
  QTableView* table_ = nullptr;
  RowStripWidget* strip_ = nullptr;
  HeatmapWidget* heatmap_ = nullptr;
  QChartView* chart_ = nullptr;
  int job_ = 0;
  int current_ = -1;
};

}  // namespace detrace::gui
