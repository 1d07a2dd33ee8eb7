#include "timeline_widget.h"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "status_style.h"

namespace detrace::gui {
namespace {

constexpr int kLabelWidth = 150;
constexpr int kAxisHeight = 24;
constexpr int kLaneHeight = 26;

QColor kindColor(db::EventKind kind) {
  switch (kind) {
    case db::EventKind::kGemm:
      return QColor(70, 150, 90);
    case db::EventKind::kCollective:
      return QColor(130, 100, 180);
    case db::EventKind::kMemcpy:
    case db::EventKind::kMemset:
      return QColor(150, 150, 150);
    default:
      return QColor(90, 130, 190);
  }
}

// A round tick step (1, 2 or 5 times a power of ten) giving about `target` ticks.
double tickStep(double range, int target) {
  double raw = range / std::max(target, 1);
  double p = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

QString timeText(double ns, double step) {
  if (step >= 1e6) return QString("%1 ms").arg(ns / 1e6, 0, 'f', step >= 1e7 ? 0 : 1);
  if (step >= 1e3) return QString("%1 µs").arg(ns / 1e3, 0, 'f', step >= 1e4 ? 0 : 1);
  return QString("%1 ns").arg(ns, 0, 'f', 0);
}

}  // namespace

TimelineWidget::TimelineWidget(QWidget* parent) : PaintedWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(false);
  setMinimumHeight(120);
  setAutoFillBackground(true);
  setPalette(QPalette(Qt::white));
}

void TimelineWidget::setTimeline(std::shared_ptr<const Timeline> timeline) {
  timeline_ = std::move(timeline);
  setMinimumHeight(kAxisHeight + 8 +
                   kLaneHeight * static_cast<int>(timeline_ ? timeline_->lanes.size() : 1));
  fit();
}

void TimelineWidget::setView(double start, double end) {
  if (end - start < 100) end = start + 100;  // 100 ns at most zoomed in
  x0_ = start;
  x1_ = end;
  update();
  emit viewChanged();
}

void TimelineWidget::fit() {
  double end = timeline_ ? static_cast<double>(timeline_->end_ns) : 1.0;
  setView(-end * 0.01, end * 1.01);
}

void TimelineWidget::zoom(double factor, double anchor) {
  setView(anchor - (anchor - x0_) * factor, anchor + (x1_ - anchor) * factor);
}

void TimelineWidget::pan(double fraction) {
  double d = (x1_ - x0_) * fraction;
  setView(x0_ + d, x1_ + d);
}

bool TimelineWidget::focusEvent(int side, int64_t seq) {
  if (!timeline_) return false;
  auto [lane, i] = timeline_->find(side, seq);
  if (lane < 0) return false;
  const auto& spans = timeline_->lanes[static_cast<size_t>(lane)].spans;
  // Show about 20 neighbours on its lane.
  const Span& s = spans[static_cast<size_t>(i)];
  int64_t lo = spans[static_cast<size_t>(std::max<int64_t>(i - 10, 0))].start;
  int64_t hi =
      spans[static_cast<size_t>(std::min<int64_t>(i + 10, static_cast<int64_t>(spans.size()) - 1))]
          .end;
  double half = std::max(
      {static_cast<double>(hi - lo) / 2, static_cast<double>(s.end - s.start) * 4, 2000.0});
  double mid = (static_cast<double>(s.start) + static_cast<double>(s.end)) / 2;
  setView(mid - half, mid + half);
  return true;
}

QRect TimelineWidget::plotRect(const QRect& area) const {
  return area.adjusted(kLabelWidth, kAxisHeight, -8, -4);
}

double TimelineWidget::xAt(double t, const QRect& plot) const {
  return plot.left() + (t - x0_) / (x1_ - x0_) * plot.width();
}

double TimelineWidget::timeAt(double x, const QRect& plot) const {
  return x0_ + (x - plot.left()) / std::max(plot.width(), 1) * (x1_ - x0_);
}

void TimelineWidget::paint(QPainter& p, const QRect& area) const {
  p.fillRect(area, Qt::white);
  if (!timeline_) {
    p.drawText(area, Qt::AlignCenter, "The timeline appears once the runs are analysed.");
    return;
  }
  const QRect plot = plotRect(area);
  paintAxis(p, plot);
  for (size_t l = 0; l < timeline_->lanes.size(); ++l) {
    QRect row(area.left(), plot.top() + static_cast<int>(l) * kLaneHeight, area.width(),
              kLaneHeight);
    if (l % 2) p.fillRect(row, QColor(246, 246, 250));
    const Lane& lane = timeline_->lanes[l];
    p.setPen(Qt::black);
    p.drawText(QRect(4, row.top(), kLabelWidth - 8, row.height()), Qt::AlignVCenter | Qt::AlignLeft,
               lane.label);
    p.save();
    p.setClipRect(QRect(plot.left(), row.top(), plot.width(), row.height()));
    paintLane(p, lane, QRect(plot.left(), row.top(), plot.width(), row.height()));
    p.restore();
  }
}

void TimelineWidget::paintAxis(QPainter& p, const QRect& plot) const {
  double step = tickStep(x1_ - x0_, std::max(plot.width() / 110, 2));
  p.setPen(QColor(120, 120, 120));
  p.drawLine(plot.left(), plot.top() - 1, plot.right(), plot.top() - 1);
  for (double t = std::ceil(x0_ / step) * step; t <= x1_; t += step) {
    int x = static_cast<int>(xAt(t, plot));
    p.setPen(QColor(225, 225, 225));
    p.drawLine(x, plot.top(), x, plot.bottom());
    p.setPen(QColor(80, 80, 80));
    p.drawLine(x, plot.top() - 5, x, plot.top() - 1);
    p.drawText(QRect(x - 50, plot.top() - kAxisHeight, 100, kAxisHeight - 6),
               Qt::AlignHCenter | Qt::AlignBottom, timeText(t, step));
  }
  p.drawText(QRect(4, plot.top() - kAxisHeight, kLabelWidth, kAxisHeight - 6),
             Qt::AlignLeft | Qt::AlignBottom, QString("since A's start"));
}

void TimelineWidget::paintLane(QPainter& p, const Lane& lane, const QRect& row) const {
  const auto& spans = lane.spans;
  const double from = x0_ - static_cast<double>(lane.longest);
  auto it = std::lower_bound(spans.begin(), spans.end(), from, [](const Span& s, double t) {
    return static_cast<double>(s.start) < t;
  });
  const int top = row.top() + 7, height = row.height() - 10;
  int last_px = INT32_MIN;
  std::vector<std::pair<int, replay::PairStatus>> marks;
  const int64_t first = timeline_->first_seq[lane.side];
  int first_x = INT32_MIN;
  for (; it != spans.end() && static_cast<double>(it->start) <= x1_; ++it) {
    double a = xAt(static_cast<double>(it->start), row), b = xAt(static_cast<double>(it->end), row);
    int px = static_cast<int>(a);
    bool differs = it->status != 0;
    if (it->seq == first) first_x = px;
    if (differs) marks.emplace_back(px, static_cast<replay::PairStatus>(it->status));
    if (px == last_px && b - a < 1 && !differs) continue;  // one box per pixel
    last_px = px;
    QColor c = differs ? statusMarkColor(static_cast<replay::PairStatus>(it->status))
                       : kindColor(it->kind);
    p.fillRect(QRectF(a, top, std::max(b - a, 1.0), height), c);
  }
  for (auto [x, status] : marks) {  // a triangle above each differing event
    p.setBrush(statusMarkColor(status));
    p.setPen(Qt::NoPen);
    const QPoint tri[3] = {QPoint(x - 4, row.top()), QPoint(x + 4, row.top()),
                           QPoint(x, row.top() + 6)};
    p.drawPolygon(tri, 3);
  }
  if (first_x != INT32_MIN) {
    p.setPen(QPen(QColor(200, 0, 0), 2, Qt::DashLine));
    p.drawLine(first_x, row.top(), first_x, row.bottom());
  }
}

const Span* TimelineWidget::spanAt(const QPoint& pos, int* side) const {
  if (!timeline_) return nullptr;
  const QRect plot = plotRect(rect());
  int l = (pos.y() - plot.top()) / kLaneHeight;
  if (pos.y() < plot.top() || l < 0 || l >= static_cast<int>(timeline_->lanes.size()))
    return nullptr;
  const Lane& lane = timeline_->lanes[static_cast<size_t>(l)];
  double t = timeAt(pos.x(), plot), slack = 3 * (x1_ - x0_) / std::max(plot.width(), 1);
  const Span* best = nullptr;
  for (const Span& s : lane.spans) {  // clicks are rare: a scan is fine
    if (static_cast<double>(s.start) - slack <= t && t <= static_cast<double>(s.end) + slack) {
      best = &s;
      if (static_cast<double>(s.start) <= t) break;
    }
  }
  if (best) *side = lane.side;
  return best;
}

void TimelineWidget::wheelEvent(QWheelEvent* event) {
  double steps = event->angleDelta().y() / 120.0;
  zoom(std::pow(0.8, steps), timeAt(event->position().x(), plotRect(rect())));
  event->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  dragging_ = true;
  dragged_ = false;
  drag_from_ = event->pos();
  drag_x0_ = x0_;
  drag_x1_ = x1_;
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (!dragging_) return;
  int dx = event->pos().x() - drag_from_.x();
  if (std::abs(dx) > 3) dragged_ = true;
  double d = -dx * (drag_x1_ - drag_x0_) / std::max(plotRect(rect()).width(), 1);
  setView(drag_x0_ + d, drag_x1_ + d);
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  dragging_ = false;
  int side = 0;
  if (!dragged_) {
    if (const Span* s = spanAt(event->pos(), &side)) emit eventClicked(side, s->seq);
  }
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent*) { fit(); }

void TimelineWidget::keyPressEvent(QKeyEvent* event) {
  double mid = (x0_ + x1_) / 2;
  switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      zoom(0.5, mid);
      break;
    case Qt::Key_Minus:
      zoom(2.0, mid);
      break;
    case Qt::Key_Left:
      pan(-0.2);
      break;
    case Qt::Key_Right:
      pan(0.2);
      break;
    case Qt::Key_0:
      fit();
      break;
    default:
      QWidget::keyPressEvent(event);
  }
}

}  // namespace detrace::gui
