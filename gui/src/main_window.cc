#include "main_window.h"

#include <QFileDialog>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QStatusBar>
#include <QTableView>

namespace detrace::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("detrace-view");
  table_ = new QTableView(this);
  table_->setModel(&model_);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  setCentralWidget(table_);
  status_ = new QLabel("Open a run directory (File > Open run…) or pass runs on the command line.");
  statusBar()->addWidget(status_);
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open run…", QKeySequence::Open, this, &MainWindow::chooseRuns);
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  connect(&loader_, &RunLoader::loaded, this, &MainWindow::onLoaded);
  resize(1100, 500);
}

void MainWindow::chooseRuns() {
  QString dir = QFileDialog::getExistingDirectory(this, "Open a detrace run directory");
  if (!dir.isEmpty()) openRuns({dir});
}

void MainWindow::openRuns(const QStringList& paths) {
  status_->setText(QString("Loading %1…").arg(paths.join(", ")));
  loader_.load(paths);
}

void MainWindow::onLoaded(int, std::vector<replay::RunSummary> runs, QStringList errors) {
  model_.setRuns(std::move(runs));
  table_->resizeColumnsToContents();
  status_->setText(errors.isEmpty() ? QString("%1 run(s) open").arg(model_.runs().size())
                                    : errors.join("; "));
  if (!errors.isEmpty() && isVisible()) QMessageBox::warning(this, "detrace-view", errors.join("\n"));
  emit runsShown();
}

}  // namespace detrace::gui
