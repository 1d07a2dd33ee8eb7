// The main window: open runs (command line, File menu, recent runs, drag and drop), load and
// analyse them in the background with progress, and show the tabs: verdict, aligned events, kernel
// selection, tensors, timeline, runs (summaries and groups) and replay. Every view holds value
// snapshots a worker produced; results of an older session are dropped.
#pragma once

#include <QMainWindow>
#include <memory>

#include "analysis_loader.h"
#include "events_view.h"
#include "groups_model.h"
#include "replay_panel.h"
#include "run_loader.h"
#include "run_summary_model.h"
#include "selection_model.h"
#include "tensor_view.h"
#include "timeline_view.h"
#include "verdict_panel.h"

class QLabel;
class QMenu;
class QProgressBar;
class QTabWidget;
class QTableView;

namespace detrace::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  enum Tab {
    kVerdictTab,
    kEventsTab,
    kSelectionTab,
    kTensorsTab,
    kTimelineTab,
    kRunsTab,
    kReplayTab
  };

  explicit MainWindow(QWidget* parent = nullptr);
  void openRuns(const QStringList& paths);
  const QStringList& openPaths() const { return paths_; }

  RunSummaryModel* summaryModel() { return &model_; }
  SelectionModel* selectionModel() { return &selection_; }
  GroupsModel* groupsModel() { return &groups_; }
  VerdictPanel* verdict() { return verdict_; }
  EventsView* events() { return events_; }
  TensorView* tensors() { return tensors_; }
  TimelineView* timeline() { return timeline_; }
  ReplayPanel* replay() { return replay_; }
  QTabWidget* tabs() { return tabs_; }
  QString statusText() const;  // the status line under the tabs
  const std::shared_ptr<const Analysis>& analysis() const { return analysis_; }

  // The verdict and key plots as a self-contained HTML file.
  Status exportReport(const QString& path);
  QStringList recentRuns() const;  // most recent first; each entry is paths joined by '\n'

 signals:
  void runsShown();  // summaries are in the Runs tab
  void
  firstScreenShown();    // the first rows of the aligned events are visible (before the analysis)
  void analysisShown();  // the verdict and every analysis view are filled
  // After analysisShown: the timeline and the first divergence's operands are loaded too (or
  // could not be, or there is no divergence: their views say so). What --report and --screenshot
  // wait for.
  void analysisReady();
  void analysisFailed(QString error);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildMenus();
  QWidget* buildRunsTab();
  void chooseRuns(bool add);
  void chooseTraceFile();
  void rememberRecent(const QStringList& paths);
  void refreshRecentMenu();
  void chooseReportPath();
  void onLoaded(int job, std::vector<replay::RunSummary> runs, QStringList errors);
  void onAnalysed(int job, std::shared_ptr<const Analysis> analysis, QString error);
  void onPairChanged(int32_t rank, replay::AlignedRow pair);
  void onFirstRows();
  void startJobs();
  void setBusy(const QString& what);
  void jumpToFirstDivergence();

  QStringList paths_;
  int session_ = 0;
  RunSummaryModel model_;
  SelectionModel selection_;
  GroupsModel groups_;
  RunLoader loader_;
  AnalysisLoader analyser_;
  EventSource source_;
  std::shared_ptr<const Analysis> analysis_;
  QTabWidget* tabs_ = nullptr;
  VerdictPanel* verdict_ = nullptr;
  EventsView* events_ = nullptr;
  TensorView* tensors_ = nullptr;
  TimelineView* timeline_ = nullptr;
  ReplayPanel* replay_ = nullptr;
  QTableView* table_ = nullptr;
  QLabel* groups_summary_ = nullptr;
  QLabel* status_ = nullptr;
  QProgressBar* busy_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  bool first_screen_sent_ = false, jobs_started_ = false, user_chose_tab_ = false;
  int ready_pending_ = 0;  // views still to load before analysisReady
};

}  // namespace detrace::gui
