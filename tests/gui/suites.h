// Factories of the GUI test suites (one QObject of test slots each).
#pragma once

#include <QObject>
#include <memory>

namespace detrace::gui::testing {

std::unique_ptr<QObject> makeMainWindowSuite();
std::unique_ptr<QObject> makeModelsSuite();
std::unique_ptr<QObject> makeRealTracesSuite();
std::unique_ptr<QObject> makeTensorsSuite();
std::unique_ptr<QObject> makeTimelineSuite();
std::unique_ptr<QObject> makeReplaySuite();
std::unique_ptr<QObject> makeReportSuite();

}  // namespace detrace::gui::testing
