#include "timeline_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QVBoxLayout>

#include "async.h"
#include "status_style.h"

namespace detrace::gui {
namespace {

QString legend() {
  QString html =
      "<span style='background:#5a82be;color:white'>&nbsp;kernel&nbsp;</span> "
      "<span style='background:#46965a;color:white'>&nbsp;GEMM&nbsp;</span> "
      "<span style='background:#8264b4;color:white'>&nbsp;collective&nbsp;</span> ";
  for (int s = 1; s < kStatusCount; ++s) {
    auto status = static_cast<replay::PairStatus>(s);
    html += QString("<span style='background:%1;color:white'>&nbsp;%2&nbsp;</span> ")
                .arg(statusMarkColor(status).name(), statusName(status));
  }
  return html + " <span style='color:#c00000'>┆ first divergence</span>";
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent), timeline_(new TimelineWidget(this)) {
  status_ = new QLabel("Open two runs to see their timelines.", this);
  auto* bar = new QHBoxLayout;
  auto add = [&](const QString& text, const QString& tip, auto slot) {
    auto* b = new QPushButton(text, this);
    b->setToolTip(tip);
    connect(b, &QPushButton::clicked, this, slot);
    bar->addWidget(b);
  };
  add("Zoom in", "Zoom in (+, mouse wheel)",
      [this] { timeline_->zoom(0.5, (timeline_->viewStart() + timeline_->viewEnd()) / 2); });
  add("Zoom out", "Zoom out (-, mouse wheel)",
      [this] { timeline_->zoom(2.0, (timeline_->viewStart() + timeline_->viewEnd()) / 2); });
  add("Fit", "Show everything (0, double-click)", [this] { timeline_->fit(); });
  add("First divergence", "Zoom to the first divergence", [this] {
    if (auto t = timeline_->timeline())
      timeline_->focusEvent(t->first_seq[0] >= 0 ? 0 : 1,
                            t->first_seq[0] >= 0 ? t->first_seq[0] : t->first_seq[1]);
  });
  bar->addWidget(status_, 1);
  auto* key = new QLabel(legend(), this);
  key->setTextFormat(Qt::RichText);
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(timeline_);
  scroll->setWidgetResizable(true);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(bar);
  layout->addWidget(key);
  layout->addWidget(scroll, 1);
  connect(timeline_, &TimelineWidget::eventClicked, this, &TimelineView::eventClicked);
}

void TimelineView::clear() {
  ++job_;
  analysis_.reset();
  rank_ = -1;
  timeline_->setTimeline(nullptr);
  status_->setText("Open two runs to see their timelines.");
}

void TimelineView::setAnalysis(std::shared_ptr<const Analysis> analysis) {
  analysis_ = std::move(analysis);
  rank_ = -1;
  const replay::RankDiff* origin = analysis_->originRank();
  showRank(origin ? origin->rank : (analysis_->ranks.empty() ? 0 : analysis_->ranks.front()->rank));
}

void TimelineView::showRank(int32_t rank) {
  if (!analysis_ || rank == rank_) return;
  rank_ = rank;
  const int job = ++job_;
  status_->setText(QString("loading rank %1…").arg(rank));
  auto analysis = analysis_;
  runAsync(
      this, [analysis, rank] { return loadTimeline(*analysis, rank); },
      [this, job](Result<std::shared_ptr<const Timeline>> result) {
        if (job != job_) return;  // stale
        if (!result.isOk()) {
          status_->setText(QString::fromStdString(result.status().message()));
          emit loaded();  // done, the status line says why it shows nothing
          return;
        }
        timeline_->setTimeline(*result);
        size_t spans = 0;
        for (const Lane& l : (*result)->lanes) spans += l.spans.size();
        QString shift = (*result)->b_shift_ns != 0
                            ? QString(" · run B shifted by %1 ms to line up the first divergence")
                                  .arg(static_cast<double>((*result)->b_shift_ns) / 1e6, 0, 'f', 3)
                            : QString();
        status_->setText(
            QString(
                "rank %1 · %2 lanes · %3 events%4 · drag to pan, wheel to zoom, click to select")
                .arg((*result)->rank)
                .arg((*result)->lanes.size())
                .arg(spans)
                .arg(shift));
        if (auto t = *result; t->first_seq[0] >= 0 || t->first_seq[1] >= 0) {
          timeline_->focusEvent(t->first_seq[0] >= 0 ? 0 : 1,
                                t->first_seq[0] >= 0 ? t->first_seq[0] : t->first_seq[1]);
        }
        emit loaded();
      });
}

}  // namespace detrace::gui
