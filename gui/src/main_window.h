// The main window: the open runs' ranks and their event counts. The divergence views (verdict,
// aligned events, kernel selection, tensors, timeline) are built on this as the analysis lands.
#pragma once

#include <QMainWindow>

#include "run_loader.h"
#include "run_summary_model.h"

class QLabel;
class QTableView;

namespace detrace::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  void openRuns(const QStringList& paths);
  RunSummaryModel* summaryModel() { return &model_; }

 signals:
  void runsShown();

 private:
  void chooseRuns();
  void onLoaded(int job, std::vector<replay::RunSummary> runs, QStringList errors);

  RunSummaryModel model_;
  RunLoader loader_;
  QTableView* table_ = nullptr;
  QLabel* status_ = nullptr;
};

}  // namespace detrace::gui
