// The GUI suites (QTest, offscreen platform). `detrace_gui_tests SUITE [QTest args]` runs one
// suite; without a suite name it runs all of them.
#include <QApplication>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "suites.h"

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QStandardPaths::setTestModeEnabled(true);
  // Recent runs (QSettings) go to a settings file of this process alone. Test mode's shared
  // ~/.qttest/config is not enough: ctest -j runs the suites as parallel processes that all open
  // runs, and one suite's rememberRecent() could land between another's write and its read.
  QTemporaryDir settings;
  if (!settings.isValid()) return 2;
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings.path());
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings.path());
  QApplication app(argc, argv);
  const std::map<std::string, std::function<std::unique_ptr<QObject>()>> suites = {
      {"MainWindow", detrace::gui::testing::makeMainWindowSuite},
      {"Models", detrace::gui::testing::makeModelsSuite},
      {"RealTraces", detrace::gui::testing::makeRealTracesSuite},
      {"Tensors", detrace::gui::testing::makeTensorsSuite},
      {"Timeline", detrace::gui::testing::makeTimelineSuite},
      {"Replay", detrace::gui::testing::makeReplaySuite},
      {"Report", detrace::gui::testing::makeReportSuite},
  };
  int status = 0;
  if (argc > 1 && suites.count(argv[1])) {
    auto suite = suites.at(argv[1])();
    argv[1] = argv[0];  // QTest parses the remaining arguments
    return QTest::qExec(suite.get(), argc - 1, argv + 1);
  }
  for (const auto& [name, make] : suites) {
    auto suite = make();
    status |= QTest::qExec(suite.get(), argc, argv);
  }
  return status;
}
