#include "main_window.h"

#include <QChartView>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabBar>
#include <QTabWidget>
#include <QTableView>
#include <QThreadPool>
#include <QVBoxLayout>

#include "html_report.h"

namespace detrace::gui {
namespace {

constexpr int kMaxRecent = 8;

QTableView* makeTable(QAbstractItemModel* model, QWidget* parent) {
  auto* t = new QTableView(parent);
  t->setModel(model);
  t->horizontalHeader()->setStretchLastSection(true);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->verticalHeader()->hide();
  t->setWordWrap(false);
  return t;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("detrace-view");
  setAcceptDrops(true);
  // Loading, analysis, filters and plots share the pool: keep a few threads even on small machines.
  QThreadPool::globalInstance()->setMaxThreadCount(std::max(4, QThread::idealThreadCount()));
  tabs_ = new QTabWidget(this);
  verdict_ = new VerdictPanel(this);
  events_ = new EventsView(&source_, this);
  tensors_ = new TensorView(this);
  timeline_ = new TimelineView(this);
  replay_ = new ReplayPanel(this);
  auto* selection_table = makeTable(&selection_, this);
  selection_table->setColumnWidth(SelectionModel::kKind, 90);
  selection_table->setColumnWidth(SelectionModel::kRanInA, 520);
  selection_table->setColumnWidth(SelectionModel::kRanInB, 520);
  tabs_->addTab(verdict_, "Verdict");
  tabs_->addTab(events_, "Aligned events");
  tabs_->addTab(selection_table, "Kernel selection");
  tabs_->addTab(tensors_, "Tensors");
  tabs_->addTab(timeline_, "Timeline");
  tabs_->addTab(buildRunsTab(), "Runs");
  tabs_->addTab(replay_, "Replay");
  setCentralWidget(tabs_);
  status_ = new QLabel(
      "Open run directories (File ▸ Open run…), pass them on the command line, or drop them here.");
  busy_ = new QProgressBar(this);
  busy_->setRange(0, 0);
  busy_->setMaximumWidth(160);
  busy_->hide();
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(busy_);
  buildMenus();
  connect(&loader_, &RunLoader::loaded, this, &MainWindow::onLoaded);
  connect(&analyser_, &AnalysisLoader::progress, this, [this](int, const QString& what) {
    verdict_->showProgress(what);
    setBusy(what);
  });
  connect(&analyser_, &AnalysisLoader::finished, this, &MainWindow::onAnalysed);
  connect(&source_, &EventSource::countsReady, this,
          [this](int session, int rank, qint64 a, qint64 b) {
            if (session == session_ && !analysis_) events_->setPositional(session, rank, a, b);
          });
  connect(&source_, &EventSource::failed, this, [this](int session, const QString& error) {
    if (session != session_) return;
    status_->setText(error);
    startJobs();  // the loaders report the error in full
  });
  connect(events_->model(), &AlignedEventsModel::firstRowsReady, this, &MainWindow::onFirstRows);
  connect(tabs_->tabBar(), &QTabBar::tabBarClicked, this, [this] { user_chose_tab_ = true; });
  connect(events_, &EventsView::currentPairChanged, this, &MainWindow::onPairChanged);
  connect(verdict_, &VerdictPanel::jumpRequested, this, &MainWindow::jumpToFirstDivergence);
  connect(timeline_, &TimelineView::eventClicked, this,
          [this](int side, qint64 seq) { events_->jumpToEvent(side, seq); });
  // analysisReady: both the timeline and the tensors of the analysis just shown have loaded.
  auto partLoaded = [this] {
    if (ready_pending_ > 0 && --ready_pending_ == 0) emit analysisReady();
  };
  connect(timeline_, &TimelineView::loaded, this, partLoaded);
  connect(tensors_, &TensorView::loaded, this, partLoaded);
  resize(1500, 950);
}

QWidget* MainWindow::buildRunsTab() {
  auto* page = new QWidget(this);
  table_ = makeTable(&model_, page);
  groups_summary_ = new QLabel(page);
  auto* layout = new QVBoxLayout(page);
  layout->addWidget(new QLabel("<b>Open runs</b> (one row per rank)", page));
  layout->addWidget(table_, 1);
  layout->addWidget(groups_summary_);
  QTableView* groups = makeTable(&groups_, page);
  groups->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  groups->horizontalHeader()->setStretchLastSection(true);
  layout->addWidget(groups, 1);
  return page;
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open run…", QKeySequence::Open, this, [this] { chooseRuns(false); });
  file->addAction("&Add run to compare…", QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this,
                  [this] { chooseRuns(true); });
  file->addAction("Open &trace file…", this, &MainWindow::chooseTraceFile);
  recent_menu_ = file->addMenu("Open &recent");
  refreshRecentMenu();
  file->addSeparator();
  file->addAction("&Export HTML report…", QKeySequence(Qt::CTRL | Qt::Key_E), this,
                  &MainWindow::chooseReportPath);
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  QMenu* go = menuBar()->addMenu("&Go");
  go->addAction("&First divergence", QKeySequence(Qt::CTRL | Qt::Key_J), this,
                &MainWindow::jumpToFirstDivergence);
  go->addAction("&Next divergence\tF8", this, [this] {
    tabs_->setCurrentWidget(events_);
    events_->nextDivergence();
  });
  go->addAction("&Previous divergence\tShift+F8", this, [this] {
    tabs_->setCurrentWidget(events_);
    events_->previousDivergence();
  });
  for (int t = kVerdictTab; t <= kReplayTab; ++t) {
    go->addAction(
        tabs_->tabText(t),
        QKeySequence(QKeyCombination(Qt::AltModifier, static_cast<Qt::Key>(Qt::Key_1 + t))), this,
        [this, t] {
          user_chose_tab_ = true;
          tabs_->setCurrentIndex(t);
        });
  }
}

void MainWindow::chooseRuns(bool add) {
  QString dir = QFileDialog::getExistingDirectory(
      this, add ? "Add a run to compare" : "Open a detrace run directory");
  if (dir.isEmpty()) return;
  openRuns(add ? paths_ + QStringList{dir} : QStringList{dir});
}

void MainWindow::chooseTraceFile() {
  QStringList files = QFileDialog::getOpenFileNames(this, "Open trace files (one per run)", {},
                                                    "detrace traces (*.dtrace);;All files (*)");
  if (!files.isEmpty()) openRuns(files);
}

QStringList MainWindow::recentRuns() const {
  return QSettings("detrace", "detrace-view").value("recent").toStringList();
}

void MainWindow::rememberRecent(const QStringList& paths) {
  QStringList abs;
  for (const QString& p : paths) abs << QFileInfo(p).absoluteFilePath();
  QStringList recent = recentRuns();
  recent.removeAll(abs.join('\n'));
  recent.prepend(abs.join('\n'));
  while (recent.size() > kMaxRecent) recent.removeLast();
  QSettings("detrace", "detrace-view").setValue("recent", recent);
  refreshRecentMenu();
}

void MainWindow::refreshRecentMenu() {
  recent_menu_->clear();
  for (const QString& entry : recentRuns()) {
    QStringList paths = entry.split('\n');
    QStringList labels;
    for (const QString& p : paths) labels << runLabel(p);
    recent_menu_->addAction(labels.join(" vs "), this, [this, paths] { openRuns(paths); })
        ->setToolTip(paths.join("\n"));
  }
  recent_menu_->setEnabled(!recent_menu_->isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  QStringList dropped;
  for (const QUrl& url : event->mimeData()->urls()) {
    if (url.isLocalFile()) dropped << url.toLocalFile();
  }
  if (dropped.isEmpty()) return;
  // One run dropped onto one open run: compare them. Otherwise open what was dropped.
  openRuns(dropped.size() == 1 && paths_.size() == 1 ? paths_ + dropped : dropped);
  event->acceptProposedAction();
}

void MainWindow::setBusy(const QString& what) {
  status_->setText(what);
  busy_->setVisible(!what.isEmpty());
}

void MainWindow::openRuns(const QStringList& paths) {
  paths_ = paths;
  ++session_;
  analysis_.reset();
  first_screen_sent_ = jobs_started_ = user_chose_tab_ = false;
  QStringList labels;
  for (const QString& p : paths) labels << runLabel(p);
  setWindowTitle(QString("detrace-view — %1").arg(labels.join(" vs ")));
  setBusy(QString("Loading %1…").arg(labels.join(", ")));
  // First screen first: the event counts and first rows (cheap reads), then summaries and analysis.
  source_.open(session_, paths.mid(0, 2));
  source_.requestCounts(session_);
  tabs_->setCurrentWidget(events_);
  selection_.setChanges({});
  groups_.setAnalysis(nullptr);
  timeline_->clear();
  tensors_->clear();
  replay_->setBackend(nullptr);
  analyser_.cancel();  // a running analysis of other runs is stale now
  verdict_->showProgress("loading");
  rememberRecent(paths);
}

void MainWindow::onFirstRows() {
  if (!first_screen_sent_) {
    first_screen_sent_ = true;
    emit firstScreenShown();
  }
  startJobs();
}

void MainWindow::startJobs() {
  if (jobs_started_) return;
  jobs_started_ = true;
  loader_.load(paths_);
  if (paths_.size() >= 2) {
    analyser_.start(paths_);
  } else {
    verdict_->showError(
        "Open a second run to compare (File ▸ Add run to compare…, or drop it here).");
  }
}

void MainWindow::onLoaded(int, std::vector<replay::RunSummary> runs, QStringList errors) {
  model_.setRuns(std::move(runs));
  table_->resizeColumnsToContents();
  if (!errors.isEmpty()) {
    status_->setText(errors.join("; "));
    if (isVisible()) QMessageBox::warning(this, "detrace-view", errors.join("\n"));
  }
  emit runsShown();
}

void MainWindow::onAnalysed(int, std::shared_ptr<const Analysis> analysis, QString error) {
  setBusy({});
  if (!analysis) {
    verdict_->showError(error);
    status_->setText(error);
    emit analysisFailed(error);
    return;
  }
  analysis_ = analysis;
  if (analysis->a != 0 || analysis->b != 1) {  // many runs: the compared pair is not the first two
    ++session_;
    source_.open(session_, {analysis->paths[static_cast<int>(analysis->a)],
                            analysis->paths[static_cast<int>(analysis->b)]});
  }
  verdict_->setAnalysis(analysis);
  selection_.setChanges(analysis->diff.selection_changes);
  groups_.setAnalysis(analysis);
  groups_summary_->setText("<b>Run groups</b>: " + groups_.summary());
  tensors_->setRuns(analysis->runs[analysis->a], analysis->runs[analysis->b],
                    analysis->diff.batch_mode);
  replay_->setBackend(
      makeLibraryReplayBackend(analysis->runs[analysis->a], analysis->runs[analysis->b]));
  ready_pending_ = 2;  // the timeline and the tensors, both loaded after this returns
  timeline_->setAnalysis(analysis);
  events_->setAnalysis(session_, analysis);
  if (!events_->jumpToFirstDivergence()) {
    onPairChanged(events_->model()->rank(), {});
    tensors_->showNone(analysis->diff.identical() && analysis->diff.complete()
                           ? "The runs are bit-identical: no divergence to show."
                           : "No first divergence to show: the verdict says why.");
  }
  if (!user_chose_tab_)
    tabs_->setCurrentWidget(verdict_);  // the landing tab while loading was the events
  status_->setText(analysis->diff.identical() && analysis->diff.complete() ? "The runs are bit-identical."
                                                                         : verdict_->headline());
  emit analysisShown();
}

QString MainWindow::statusText() const { return status_->text(); }

void MainWindow::onPairChanged(int32_t rank, replay::AlignedRow pair) {
  if (!analysis_) return;
  timeline_->showRank(rank);
  if (pair.a >= 0 || pair.b >= 0) {
    tensors_->showPair(rank, pair.a, pair.b);
    replay_->setEvent(rank, pair.a, pair.b, analysis_->diff.batch_mode);
  }
}

void MainWindow::jumpToFirstDivergence() {
  tabs_->setCurrentWidget(events_);
  events_->jumpToFirstDivergence();
  events_->table()->setFocus();
}

void MainWindow::chooseReportPath() {
  if (!analysis_) {
    QMessageBox::information(this, "detrace-view", "Open and analyse two runs first.");
    return;
  }
  QString path = QFileDialog::getSaveFileName(
      this, "Export the verdict as HTML",
      QString("detrace-%1-vs-%2.html").arg(analysis_->label_a, analysis_->label_b),
      "HTML (*.html)");
  if (path.isEmpty()) return;
  Status s = exportReport(path);
  status_->setText(s.isOk() ? QString("Report written to %1").arg(path)
                            : QString::fromStdString(s.message()));
}

Status MainWindow::exportReport(const QString& path) {
  if (!analysis_)
    return makeError(ErrorCode::kInvalidArgument, "no analysis to export: open two runs first");
  std::vector<ReportImage> images;
  if (timeline_->widget()->timeline()) {
    int lanes = static_cast<int>(timeline_->widget()->timeline()->lanes.size());
    images.push_back(
        {"Timeline around the first divergence (rank, streams; differing events marked)",
         timeline_->widget()->renderImage(QSize(1400, 40 + 26 * lanes))});
  }
  if (!tensors_->strip()->rows().empty()) {
    images.push_back({"Per-row fingerprints of the selected operand (red rows differ)",
                      tensors_->strip()->renderImage(QSize(1400, 80))});
  }
  if (!tensors_->heatmap()->image().isNull()) {
    images.push_back(
        {"ULP differences per element", tensors_->heatmap()->renderImage(QSize(900, 500))});
    QChartView* chart = tensors_->histogram();
    QSize old = chart->size();
    chart->resize(900, 400);
    images.push_back({"Elements by ULP difference", chart->grab().toImage()});
    chart->resize(old);
  }
  return writeTextFile(path, htmlReport(*analysis_, images));
}

}  // namespace detrace::gui
