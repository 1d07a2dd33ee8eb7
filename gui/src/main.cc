// detrace-view RUN_A [RUN_B …]: the desktop viewer for detrace runs.
#include <QApplication>
#include <QCommandLineParser>
#include <cstdio>

#include "detrace/base/version.h"

#include "main_window.h"
#include "screenshots.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("detrace-view");
  QApplication::setApplicationVersion(detrace::kToolVersion);
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Desktop viewer for detrace runs (directories made by `detrace record`): the first "
      "divergence between "
      "two runs, their aligned events, kernel selection, tensors, timeline and replay.");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument(
      "runs", "Run directories or .dtrace files to open (two or more to compare).", "[RUN…]");
  QCommandLineOption shots(
      "screenshot", "Save each main tab as DIR/PREFIX-<tab>.png once analysed, then exit.", "DIR");
  QCommandLineOption prefix("screenshot-prefix",
                            "File name prefix for --screenshot (default: view).", "PREFIX", "view");
  QCommandLineOption report(
      "report", "Write the verdict as a self-contained HTML file once analysed, then exit.",
      "FILE");
  parser.addOptions({shots, prefix, report});
  parser.process(app);
  const QStringList runs = parser.positionalArguments();
  if ((parser.isSet(shots) || parser.isSet(report)) && runs.size() < 2) {
    std::fprintf(stderr, "detrace-view: --screenshot and --report need two or more runs\n");
    return 2;
  }
  detrace::gui::MainWindow window;
  window.show();
  if (parser.isSet(shots)) {
    auto* taker =
        new detrace::gui::ScreenshotTaker(&window, parser.value(shots), parser.value(prefix));
    QObject::connect(taker, &detrace::gui::ScreenshotTaker::done, &app,
                     [](bool ok) { QApplication::exit(ok ? 0 : 2); });
  } else if (parser.isSet(report)) {
    const QString path = parser.value(report);
    auto write = [&window, path] {
      auto status = window.exportReport(path);
      if (!status.isOk()) std::fprintf(stderr, "detrace-view: %s\n", status.message().c_str());
      QApplication::exit(status.isOk() ? 0 : 2);
    };
    // The report's plots need the timeline and the tensors of the first divergence.
    QObject::connect(&window, &detrace::gui::MainWindow::analysisReady, &app, write,
                     Qt::SingleShotConnection);
    QObject::connect(&window, &detrace::gui::MainWindow::analysisFailed, &app,
                     [](const QString& e) {
                       std::fprintf(stderr, "detrace-view: %s\n", e.toUtf8().constData());
                       QApplication::exit(2);
                     });
  }
  if (!runs.isEmpty()) window.openRuns(runs);
  return QApplication::exec();
}
