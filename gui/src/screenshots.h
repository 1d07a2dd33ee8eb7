// Screenshot mode (detrace-view --screenshot DIR RUN_A RUN_B): once the runs are analysed and the
// timeline and tensors are loaded, saves each main tab as DIR/<name>.png and quits. Used by
// scripts/screenshots under Xvfb.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>

namespace detrace::gui {

class MainWindow;

class ScreenshotTaker : public QObject {
  Q_OBJECT

 public:
  // `prefix` names the files: <prefix>-verdict.png, ...
  ScreenshotTaker(MainWindow* window, QString dir, QString prefix);

 signals:
  void done(bool ok);

 private:
  void onReady();
  void shootNext();

  MainWindow* window_;
  QString dir_, prefix_;
  int next_ = 0;
  QStringList written_;
};

}  // namespace detrace::gui
