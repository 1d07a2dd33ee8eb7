// detrace-view RUN_A [RUN_B …]: the desktop viewer for detrace runs.
#include <QApplication>
#include <QCommandLineParser>
#include <cstdio>
#include <cstring>

#include "detrace/base/version.h"

#include "main_window.h"
#include "screenshots.h"

namespace {

// Qt reads the command line as UTF-8, and a name that is not (a Latin-1 directory name) comes out
// with U+FFFD in it: no file of that name exists. Such an argument is named here instead of being
// reported as missing.
const char* firstNonUtf8Argument(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const QByteArray raw(argv[i]);
    if (QString::fromUtf8(raw).toUtf8() != raw) return argv[i];
  }
  return nullptr;
}

int usageError(QString message) {
  if (message.endsWith('.')) message.chop(1);  // Qt's sentences end with one; ours go on
  std::fprintf(stderr, "detrace-view: %s (see detrace-view --help)\n", message.toUtf8().constData());
  return 2;
}

}  // namespace

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
      "report",
      "Write the verdict as a self-contained HTML file once analysed, then exit (with "
      "--screenshot, after the screenshots).",
      "FILE");
  parser.addOptions({shots, prefix, report});
  // parse(), not process(): a refused command line exits 2, as detrace's do (process() exits 1).
  if (!parser.parse(QApplication::arguments())) return usageError(parser.errorText());
  parser.process(app);  // parsed already: only --help, --help-all and --version act (and exit)
  if (const char* odd = firstNonUtf8Argument(argc, argv)) {
    std::fprintf(stderr,
                 "detrace-view: '%s' is not valid UTF-8, which the viewer cannot open; rename it, "
                 "or give a symbolic link with a UTF-8 name (detrace diff takes any name)\n",
                 odd);
    return 2;
  }
  const QStringList runs = parser.positionalArguments();
  if ((parser.isSet(shots) || parser.isSet(report)) && runs.size() < 2) {
    return usageError("--screenshot and --report need two or more runs");
  }
  detrace::gui::MainWindow window;
  window.show();
  const QString report_path = parser.isSet(report) ? parser.value(report) : QString();
  // Writes the report (when asked for, and all went well so far) and exits: 0 when all did.
  auto finish = [&window, report_path](bool ok) {
    if (ok && !report_path.isEmpty()) {
      auto status = window.exportReport(report_path);
      if (!status.isOk()) std::fprintf(stderr, "detrace-view: %s\n", status.message().c_str());
      ok = ok && status.isOk();
    }
    QApplication::exit(ok ? 0 : 2);
  };
  if (parser.isSet(shots)) {
    auto* taker =
        new detrace::gui::ScreenshotTaker(&window, parser.value(shots), parser.value(prefix));
    QObject::connect(taker, &detrace::gui::ScreenshotTaker::done, &app, finish);
  } else if (parser.isSet(report)) {
    // The report's plots need the timeline and the tensors of the first divergence.
    QObject::connect(&window, &detrace::gui::MainWindow::analysisReady, &app,
                     [finish] { finish(true); }, Qt::SingleShotConnection);
    QObject::connect(&window, &detrace::gui::MainWindow::analysisFailed, &app,
                     [](const QString& e) {
                       std::fprintf(stderr, "detrace-view: %s\n", e.toUtf8().constData());
                       QApplication::exit(2);
                     });
  }
  if (!runs.isEmpty()) window.openRuns(runs);
  return QApplication::exec();
}
