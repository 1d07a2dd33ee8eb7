// The window on synthetic runs: background loading, the first screen, drag and drop, recent runs.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDropEvent>
#include <QFileInfo>
#include <QMimeData>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>
#include <QUrl>

#include "gui_test_util.h"
#include "html_report.h"
#include "replay/deep_synth.h"
#include "suites.h"

namespace detrace::gui::testing {
namespace {

class MainWindowSuite : public QObject {
  Q_OBJECT

 private slots:
  void loadsARunInTheBackgroundAndShowsItsRanks() {
    detrace::testing::TempDir dir;
    detrace::testing::Rng rng;
    int64_t n[2] = {rng.range(10, 300), rng.range(10, 300)};
    for (int32_t rank = 0; rank < 2; ++rank) {
      auto w = db::TraceWriter::create(dir.file(fmt::format("r{}.dtrace", rank)));
      QVERIFY(w.isOk());
      (*w)->setRank({rank, 2, rank, rank, 1, "h", "NVIDIA H200", ""});
      int64_t k = (*w)->intern("k");
      for (int64_t i = 0; i < n[rank]; ++i)
        (void)(*w)->append(detrace::testing::randomKernel(rng, k, -1));
      QVERIFY((*w)->close().isOk());
    }
    MainWindow window;
    QAbstractItemModelTester tester(window.summaryModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy shown(&window, &MainWindow::runsShown);
    QSignalSpy first(&window, &MainWindow::firstScreenShown);
    window.openRuns({QString::fromStdString(dir.path().string())});
    QVERIFY(shown.wait(30000));  // generous: CI machines are loaded
    auto* model = window.summaryModel();
    QCOMPARE(model->rowCount(), 2);
    for (int row = 0; row < 2; ++row) {
      QCOMPARE(model->index(row, RunSummaryModel::kRank).data().toInt(), row);
      QCOMPARE(model->index(row, RunSummaryModel::kEvents).data().toLongLong(), n[row]);
      QCOMPARE(model->index(row, RunSummaryModel::kGpu).data().toString(), QString("NVIDIA H200"));
    }
    // One run: its events are listed by position, with the first rows' names fetched.
    QVERIFY(first.count() > 0 || first.wait(30000));
    auto* events = window.events()->model();
    QCOMPARE(events->rowCount(), static_cast<int>(n[0]));
    QCOMPARE(events->index(0, AlignedEventsModel::kNameA).data().toString(), QString("k"));
    QCOMPARE(events->index(0, AlignedEventsModel::kStatus).data().toString(),
             QString("analysing…"));
    QVERIFY(window.verdict()->headline().contains("Open a second run"));
  }

  void deepWindowVerdictNamesTheKernelInsideTheStretch() {
    detrace::testing::TempDir dir;
    namespace deep = detrace::testing::deep;
    deep::Program program = deep::toyLayer();
    deep::RunSpec spec{false, 1, 5, "ops:0:1", 77, {}};
    QVERIFY(deep::writeRun(dir.file("deep-a"), program, spec).isOk());
    spec.b = true;
    QVERIFY(deep::writeRun(dir.file("deep-b"), program, spec).isOk());
    MainWindow window;
    QVERIFY(openAndWait(window, {QString::fromStdString(dir.file("deep-a")),
                                 QString::fromStdString(dir.file("deep-b"))}));
    QString text = window.verdict()->field("deep");
    QVERIFY2(text.contains("planted_racy_reduce"), qPrintable(text));
    QVERIFY2(text.contains("arg2"), qPrintable(text));
    QVERIFY2(text.contains("nondeterministic"), qPrintable(text));
    QVERIFY(window.analysis() != nullptr);
    QString html = htmlReport(*window.analysis(), {});
    QVERIFY2(html.contains("<th>deep window</th>") && html.contains("planted_racy_reduce"), qPrintable(html));
    // Runs without deep records leave the field out.
    MainWindow plain;
    QVERIFY(openAndWait(plain, {runPath("bs1-a"), runPath("bs1-b")}));
    QVERIFY(plain.verdict()->field("deep").isEmpty());
  }

  void aDroppedRunIsComparedWithTheOpenOne() {
    MainWindow window;
    window.show();
    QSignalSpy shown(&window, &MainWindow::runsShown);
    window.openRuns({runPath("bs1-a")});
    QVERIFY(shown.wait(30000));  // generous: CI machines are loaded
    QSignalSpy analysed(&window, &MainWindow::analysisShown);
    QMimeData mime;
    mime.setUrls({QUrl::fromLocalFile(runPath("bs1-b"))});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&window, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&window, &drop);
    QCOMPARE(window.openPaths(), QStringList({runPath("bs1-a"), runPath("bs1-b")}));
    QVERIFY(analysed.wait(30000));
    QVERIFY2(window.verdict()->headline().startsWith("IDENTICAL: bs1-a and bs1-b"),
             qPrintable(window.verdict()->headline()));
    // Both sets were remembered, most recent first (the settings file is this process's own:
    // gui_test_main.cc).
    const QString a = QFileInfo(runPath("bs1-a")).absoluteFilePath();
    const QString b = QFileInfo(runPath("bs1-b")).absoluteFilePath();
    QStringList recent = window.recentRuns();
    QVERIFY2(recent.size() >= 2, qPrintable(recent.join(" | ")));
    QCOMPARE(recent[0], a + '\n' + b);
    QCOMPARE(recent[1], a);
  }

  void staleAnalysesAreDropped() {
    MainWindow window;
    QSignalSpy analysed(&window, &MainWindow::analysisShown);
    window.openRuns({runPath("nondet-a"), runPath("nondet-b")});
    window.openRuns({runPath("bs1-a"), runPath("bs1-b")});  // before the first finishes
    QVERIFY(analysed.wait(30000));
    QTest::qWait(500);  // the first job's result, if any, must not arrive after the second's
    QCOMPARE(analysed.count(), 1);
    QVERIFY(window.verdict()->headline().startsWith("IDENTICAL: bs1-a and bs1-b"));
  }
};

}  // namespace

std::unique_ptr<QObject> makeMainWindowSuite() { return std::make_unique<MainWindowSuite>(); }

}  // namespace detrace::gui::testing

#include "main_window_test.moc"
