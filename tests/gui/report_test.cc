// The HTML report of a real pair: the verdict's facts and the key plots as inline PNG images.
#include <QFile>
#include <QImage>
#include <QRegularExpression>
#include <QTest>

#include "gui_test_util.h"
#include "suites.h"

namespace detrace::gui::testing {
namespace {

class ReportSuite : public QObject {
  Q_OBJECT

 private slots:
  void htmlReportIsSelfContained() {
    MainWindow w;
    QVERIFY(openAndWait(w, {runPath("h4k-bs1"), runPath("h4k-bs64")}, true));
    detrace::testing::TempDir dir;
    QString path = QString::fromStdString(dir.file("report.html"));
    Status s = w.exportReport(path);
    QVERIFY2(s.isOk(), s.message().c_str());
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QString html = QString::fromUtf8(f.readAll());
    QVERIFY(html.contains("DIVERGENT: h4k-bs1 and h4k-bs64 part on rank 0."));
    QVERIFY(html.contains("batch-variant"));
    QVERIFY(html.contains("nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT"));
    QVERIFY(!html.contains("src='http"));  // nothing external
    QRegularExpression png("src='data:image/png;base64,([A-Za-z0-9+/=]+)'");
    int images = 0;
    for (auto it = png.globalMatch(html); it.hasNext(); ++images) {
      QImage img =
          QImage::fromData(QByteArray::fromBase64(it.next().captured(1).toLatin1()), "PNG");
      QVERIFY(!img.isNull());
      QVERIFY(img.width() >= 400);
    }
    QCOMPARE(images, 2);  // timeline and row strip (these runs captured no bytes: no heatmap)
  }

  // Identical runs have no first divergence: the tensors tab says so instead of loading a pair,
  // and analysisReady (what --report and --screenshot wait for) still comes.
  void identicalRunsAreReadyAndReported() {
    MainWindow w;
    QVERIFY(openAndWait(w, {runPath("bs1-a"), runPath("bs1-b")}, true));
    QVERIFY2(w.tensors()->model()->rowCount() == 0, "no pair's operands are shown");
    detrace::testing::TempDir dir;
    QString path = QString::fromStdString(dir.file("identical.html"));
    Status s = w.exportReport(path);
    QVERIFY2(s.isOk(), s.message().c_str());
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QString html = QString::fromUtf8(f.readAll());
    QVERIFY2(html.contains("IDENTICAL: bs1-a and bs1-b"), qPrintable(html.left(400)));
  }

  void noAnalysisNoReport() {
    MainWindow w;
    QVERIFY(!w.exportReport("/tmp/never-written.html").isOk());
  }
};

}  // namespace

std::unique_ptr<QObject> makeReportSuite() { return std::make_unique<ReportSuite>(); }

}  // namespace detrace::gui::testing

#include "report_test.moc"
