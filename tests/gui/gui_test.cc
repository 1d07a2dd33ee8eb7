// GUI tests under QT_QPA_PLATFORM=offscreen: the summary model passes QAbstractItemModelTester and
// the window shows a real run loaded in the background.
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QSignalSpy>
#include <QTest>

#include "../db/test_util.h"
#include "detrace/db/writer.h"
#include "main_window.h"

namespace {

class GuiTest : public QObject {
  Q_OBJECT

 private slots:
  void loadsARunInTheBackgroundAndShowsItsRanks() {
    detrace::testing::TempDir dir;
    detrace::testing::Rng rng;
    int64_t n[2] = {rng.range(10, 300), rng.range(10, 300)};
    for (int32_t rank = 0; rank < 2; ++rank) {
      auto w = detrace::db::TraceWriter::create(dir.file(fmt::format("r{}.dtrace", rank)));
      QVERIFY(w.isOk());
      (*w)->setRank({rank, 2, rank, rank, 1, "h", "NVIDIA H200", ""});
      int64_t k = (*w)->intern("k");
      for (int64_t i = 0; i < n[rank]; ++i) (void)(*w)->append(detrace::testing::randomKernel(rng, k, -1));
      QVERIFY((*w)->close().isOk());
    }
    detrace::gui::MainWindow window;
    QAbstractItemModelTester tester(window.summaryModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy shown(&window, &detrace::gui::MainWindow::runsShown);
    window.openRuns({QString::fromStdString(dir.path().string())});
    QVERIFY(shown.wait(10000));
    auto* model = window.summaryModel();
    QCOMPARE(model->rowCount(), 2);
    for (int row = 0; row < 2; ++row) {
      QCOMPARE(model->index(row, detrace::gui::RunSummaryModel::kRank).data().toInt(), row);
      QCOMPARE(model->index(row, detrace::gui::RunSummaryModel::kEvents).data().toLongLong(), n[row]);
      QCOMPARE(model->index(row, detrace::gui::RunSummaryModel::kGpu).data().toString(), QString("NVIDIA H200"));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  GuiTest test;
  return QTest::qExec(&test, argc, argv);
}

#include "gui_test.moc"
