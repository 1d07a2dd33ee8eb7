// The tensor plots: a strip of per-row fingerprint states (which rows, i.e. tokens, differ), a
// heatmap of per-element ULP differences, and their histogram (Qt Charts).
#pragma once

#include <QImage>
#include <QWidget>
#include <vector>

#include "painted_widget.h"

#include "detrace/replay/operand_diff.h"

class QChart;

namespace detrace::gui {

class RowStripWidget : public PaintedWidget {
  Q_OBJECT

 public:
  explicit RowStripWidget(QWidget* parent = nullptr);
  void setRows(std::vector<replay::RowState> rows, const QString& caption);
  const std::vector<replay::RowState>& rows() const { return rows_; }
  QSize sizeHint() const override { return {600, 70}; }

 private:
  void paint(QPainter& p, const QRect& area) const override;
  std::vector<replay::RowState> rows_;
  QString caption_;
};

class HeatmapWidget : public PaintedWidget {
  Q_OBJECT

 public:
  explicit HeatmapWidget(QWidget* parent = nullptr);
  // Null clears it and shows `note` instead.
  void setDiff(const replay::UlpDiff* diff, const QString& note);
  const QImage& image() const { return image_; }  // one pixel per block of elements
  QSize sizeHint() const override { return {600, 260}; }

 private:
  void paint(QPainter& p, const QRect& area) const override;
  QImage image_;
  QString note_;
  uint64_t max_ulp_ = 0;
  int64_t rows_ = 0, cols_ = 0;
};

// Colour of an ULP difference on a log scale up to `max` (white for 0).
QColor ulpColor(uint64_t ulp, uint64_t max);
// A bar chart of ulpHistogram buckets; the caller owns the chart.
QChart* makeHistogramChart(const std::vector<int64_t>& buckets);
// "0", "1", "2-3", "4-7", ... for bucket k.
QString bucketLabel(size_t k);

}  // namespace detrace::gui
