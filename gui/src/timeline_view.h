// The timeline tab: a TimelineWidget for the rank shown in the aligned events, loaded in the
// background, with zoom / fit / go-to-divergence buttons and a colour legend.
#pragma once

#include <QWidget>
#include <memory>

#include "analysis.h"
#include "timeline_widget.h"

class QLabel;

namespace detrace::gui {

class TimelineView : public QWidget {
  Q_OBJECT

 public:
  explicit TimelineView(QWidget* parent = nullptr);
  TimelineWidget* widget() { return timeline_; }
  void setAnalysis(std::shared_ptr<const Analysis> analysis);
  void showRank(int32_t rank);  // loads it if not shown yet: loaded() when done (or failed: the
                                // status line says why)
  void clear();

 signals:
  void loaded();
  void eventClicked(int side, qint64 seq);

 private:
  std::shared_ptr<const Analysis> analysis_;
  TimelineWidget* timeline_;
  QLabel* status_;
  int job_ = 0;
  int32_t rank_ = -1;
};

}  // namespace detrace::gui
