// The timeline: one row per lane (run A's streams, then run B's), events as boxes at their GPU
// times, differing events in their status colour with a mark above, the first divergence as a
// dashed line. Wheel or +/- zooms around the cursor, dragging or the arrow keys pan, double-click
// or 0 fits, a click on an event selects it. Paints only what is visible, one box per pixel at
// most, so a million events draw fast.
#pragma once

#include <QWidget>
#include <memory>

#include "painted_widget.h"
#include "timeline_data.h"

namespace detrace::gui {

class TimelineWidget : public PaintedWidget {
  Q_OBJECT

 public:
  explicit TimelineWidget(QWidget* parent = nullptr);
  void setTimeline(std::shared_ptr<const Timeline> timeline);
  const std::shared_ptr<const Timeline>& timeline() const { return timeline_; }

  // The visible time range, ns since each side's start.
  double viewStart() const { return x0_; }
  double viewEnd() const { return x1_; }
  void setView(double start, double end);
  void fit();
  void zoom(double factor, double anchor_ns);  // factor < 1 zooms in
  void pan(double fraction);                   // of the visible width
  // Centres the view on an event and zooms so that a few neighbours are visible.
  bool focusEvent(int side, int64_t seq);
  QSize sizeHint() const override { return {900, 60 + 28 * 6}; }

 signals:
  void eventClicked(int side, qint64 seq);
  void viewChanged();

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;

 private:
  void paint(QPainter& p, const QRect& area) const override;
  void paintAxis(QPainter& p, const QRect& plot) const;
  void paintLane(QPainter& p, const Lane& lane, const QRect& row) const;
  double timeAt(double x, const QRect& plot) const;
  double xAt(double t, const QRect& plot) const;
  QRect plotRect(const QRect& area) const;
  const Span* spanAt(const QPoint& pos, int* side) const;

  std::shared_ptr<const Timeline> timeline_;
  double x0_ = 0, x1_ = 1;
  QPoint drag_from_;
  double drag_x0_ = 0, drag_x1_ = 0;
  bool dragging_ = false, dragged_ = false;
};

}  // namespace detrace::gui
