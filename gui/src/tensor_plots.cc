#include "tensor_plots.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QPainter>
#include <QValueAxis>
#include <algorithm>
#include <bit>
#include <cmath>

namespace detrace::gui {
namespace {

constexpr int kMaxHeatmapSide = 512;

QColor rowColor(replay::RowState s) {
  switch (s) {
    case replay::RowState::kEqual:
      return QColor(120, 190, 120);
    case replay::RowState::kDiffer:
      return QColor(215, 40, 40);
    case replay::RowState::kMissing:
      return QColor(190, 190, 190);
  }
  return Qt::gray;
}

}  // namespace

RowStripWidget::RowStripWidget(QWidget* parent) : PaintedWidget(parent) { setMinimumHeight(64); }

void RowStripWidget::setRows(std::vector<replay::RowState> rows, const QString& caption) {
  rows_ = std::move(rows);
  caption_ = caption;
  update();
}

void RowStripWidget::paint(QPainter& p, const QRect& area) const {
  p.fillRect(area, Qt::white);
  const int text_h = p.fontMetrics().height() + 4;
  p.setPen(Qt::black);
  p.drawText(area.adjusted(4, 0, -4, 0), Qt::AlignTop | Qt::AlignLeft,
             rows_.empty() ? QString("no per-row fingerprints for this operand") : caption_);
  if (rows_.empty()) return;
  QRect strip = area.adjusted(4, text_h, -4, -text_h);
  const double per = static_cast<double>(strip.width()) / static_cast<double>(rows_.size());
  if (per >= 1.0) {
    for (size_t i = 0; i < rows_.size(); ++i) {
      QRectF cell(strip.left() + per * static_cast<double>(i), strip.top(),
                  std::max(per - (per > 4 ? 1 : 0), 1.0), strip.height());
      p.fillRect(cell, rowColor(rows_[i]));
    }
  } else {  // more rows than pixels: a pixel is red if any of its rows differs
    for (int x = 0; x < strip.width(); ++x) {
      size_t lo = static_cast<size_t>(x / per),
             hi = std::min(rows_.size(), static_cast<size_t>((x + 1) / per) + 1);
      replay::RowState s = replay::RowState::kEqual;
      for (size_t i = lo; i < hi; ++i) {
        if (rows_[i] == replay::RowState::kDiffer)
          s = rows_[i];
        else if (rows_[i] == replay::RowState::kMissing && s == replay::RowState::kEqual)
          s = rows_[i];
      }
      p.fillRect(QRect(strip.left() + x, strip.top(), 1, strip.height()), rowColor(s));
    }
  }
  p.drawText(QRect(strip.left(), strip.bottom() + 2, 200, text_h), Qt::AlignLeft, "row 0");
  p.drawText(QRect(strip.right() - 200, strip.bottom() + 2, 200, text_h), Qt::AlignRight,
             QString("row %1").arg(rows_.size() - 1));
}

QColor ulpColor(uint64_t ulp, uint64_t max) {
  if (ulp == 0) return Qt::white;
  double t =
      max <= 1 ? 1.0
               : std::log2(static_cast<double>(ulp) + 1) / std::log2(static_cast<double>(max) + 1);
  t = std::clamp(t, 0.0, 1.0);
  // Pale yellow -> orange -> dark red.
  return QColor::fromHsvF(static_cast<float>(0.15 * (1 - t)), static_cast<float>(0.35 + 0.65 * t),
                          static_cast<float>(1.0 - 0.45 * t));
}

HeatmapWidget::HeatmapWidget(QWidget* parent) : PaintedWidget(parent) { setMinimumHeight(160); }

void HeatmapWidget::setDiff(const replay::UlpDiff* diff, const QString& note) {
  note_ = note;
  image_ = QImage();
  if (diff && diff->rows > 0 && diff->cols > 0) {
    rows_ = diff->rows;
    cols_ = diff->cols;
    max_ulp_ = diff->max_ulp;
    int w = static_cast<int>(std::min<int64_t>(cols_, kMaxHeatmapSide));
    int h = static_cast<int>(std::min<int64_t>(rows_, kMaxHeatmapSide));
    std::vector<uint64_t> block(static_cast<size_t>(w) * static_cast<size_t>(h), 0);
    for (int64_t r = 0; r < rows_; ++r) {  // each pixel: the largest difference in its block
      size_t y = static_cast<size_t>(r * h / rows_);
      for (int64_t c = 0; c < cols_; ++c) {
        size_t x = static_cast<size_t>(c * w / cols_);
        uint64_t& v = block[y * static_cast<size_t>(w) + x];
        v = std::max(v, diff->ulps[static_cast<size_t>(r * cols_ + c)]);
      }
    }
    image_ = QImage(w, h, QImage::Format_RGB32);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x)
        image_.setPixelColor(x, y, ulpColor(block[static_cast<size_t>(y * w + x)], max_ulp_));
    }
  }
  update();
}

void HeatmapWidget::paint(QPainter& p, const QRect& area) const {
  p.fillRect(area, Qt::white);
  const int text_h = p.fontMetrics().height() + 4;
  if (image_.isNull()) {
    p.setPen(QColor(90, 90, 90));
    p.drawText(area.adjusted(8, 8, -8, -8), Qt::AlignCenter | Qt::TextWordWrap,
               note_.isEmpty() ? QString("No captured bytes to compare.") : note_);
    return;
  }
  p.setPen(Qt::black);
  p.drawText(
      area.adjusted(4, 0, -4, 0), Qt::AlignTop | Qt::AlignLeft,
      QString("ULP difference per element: %1 rows (down) x %2 elements (across); white = equal, "
              "dark red = %3 ULP")
          .arg(rows_)
          .arg(cols_)
          .arg(max_ulp_));
  QRect plot = area.adjusted(4, text_h + 2, -4, -4);
  p.setRenderHint(QPainter::SmoothPixmapTransform, false);
  p.drawImage(plot, image_);
  p.setPen(QColor(160, 160, 160));
  p.drawRect(plot.adjusted(0, 0, -1, -1));
}

QString bucketLabel(size_t k) {
  if (k == 0) return "0";
  if (k == 1) return "1";
  if (k >= 64) return "≥2^63";
  uint64_t lo = uint64_t{1} << (k - 1), hi = (uint64_t{1} << k) - 1;
  return QString("%1-%2").arg(lo).arg(hi);
}

QChart* makeHistogramChart(const std::vector<int64_t>& buckets) {
  auto* set = new QBarSet("elements");
  set->setColor(QColor(200, 70, 40));
  QStringList labels;
  int64_t top = 1;
  for (size_t k = 0; k < buckets.size(); ++k) {
    *set << static_cast<double>(buckets[k]);
    labels << bucketLabel(k);
    top = std::max(top, buckets[k]);
  }
  auto* series = new QBarSeries;
  series->append(set);
  auto* chart = new QChart;
  chart->addSeries(series);
  chart->setTitle("Elements by ULP difference");
  auto* x = new QBarCategoryAxis;
  x->append(labels);
  x->setTitleText("ULPs");
  auto* y = new QValueAxis;
  y->setRange(0, static_cast<double>(top) * 1.05);
  y->setLabelFormat("%d");
  y->setTitleText("elements");
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  chart->legend()->hide();
  return chart;
}

}  // namespace detrace::gui
