// detrace-view RUN_A [RUN_B …]: the desktop viewer for detrace runs.
#include <QApplication>
#include <QCommandLineParser>

#include "detrace/base/version.h"
#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("detrace-view");
  QApplication::setApplicationVersion(detrace::kToolVersion);
  QCommandLineParser parser;
  parser.setApplicationDescription("Desktop viewer for detrace runs (directories made by `detrace record`).");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("runs", "Run directories or .dtrace files to open.", "[RUN…]");
  parser.process(app);
  detrace::gui::MainWindow window;
  window.show();
  if (!parser.positionalArguments().isEmpty()) window.openRuns(parser.positionalArguments());
  return QApplication::exec();
}
