#include "screenshots.h"

#include <QDir>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>
#include <iterator>

#include "main_window.h"

namespace detrace::gui {
namespace {

struct Shot {
  int tab;
  const char* name;
};
constexpr Shot kShots[] = {
    {MainWindow::kVerdictTab, "verdict"},     {MainWindow::kEventsTab, "events"},
    {MainWindow::kSelectionTab, "selection"}, {MainWindow::kTensorsTab, "tensors"},
    {MainWindow::kTimelineTab, "timeline"},   {MainWindow::kRunsTab, "runs"},
    {MainWindow::kReplayTab, "replay"}};
constexpr int kSettleMs = 700;  // for block fetches and layout after a tab switch

}  // namespace

ScreenshotTaker::ScreenshotTaker(MainWindow* window, QString dir, QString prefix)
    : QObject(window), window_(window), dir_(std::move(dir)), prefix_(std::move(prefix)) {
  QDir().mkpath(dir_);
  // The timeline and the tensors of the first divergence (or their word that there is none).
  connect(window_, &MainWindow::analysisReady, this, &ScreenshotTaker::onReady,
          Qt::SingleShotConnection);
  connect(window_, &MainWindow::analysisFailed, this, [this](const QString& error) {
    std::fprintf(stderr, "detrace-view: %s\n", error.toUtf8().constData());
    emit done(false);
  });
}

void ScreenshotTaker::onReady() {
  QTimer::singleShot(kSettleMs, this, &ScreenshotTaker::shootNext);
}

void ScreenshotTaker::shootNext() {
  if (next_ > 0) {  // the previous tab has settled: save it
    const Shot& shot = kShots[next_ - 1];
    QString path = QDir(dir_).filePath(QString("%1-%2.png").arg(prefix_, QString(shot.name)));
    if (!window_->grab().save(path)) {
      std::fprintf(stderr, "detrace-view: cannot write %s\n", path.toUtf8().constData());
      emit done(false);
      return;
    }
    written_ << path;
  }
  if (next_ == static_cast<int>(std::size(kShots))) {
    std::printf("%s\n", written_.join("\n").toUtf8().constData());
    emit done(true);
    return;
  }
  window_->tabs()->setCurrentIndex(kShots[next_].tab);
  ++next_;
  QTimer::singleShot(kSettleMs, this, &ScreenshotTaker::shootNext);
}

}  // namespace detrace::gui
