// The HTML report of a real pair: the verdict's facts and the key plots as inline PNG images.
#include <QFile>
#include <QImage>
#include <QRegularExpression>
#include <QTest>

#include <filesystem>
#include <random>

#include "gui_test_util.h"
#include "suites.h"

namespace detrace::gui::testing {
namespace {

// Writes `w`'s report to `path` and reads it back; empty (with `error` set) if either failed.
QString exportedHtml(MainWindow& w, const std::string& path, QString& error) {
  Status s = w.exportReport(QString::fromStdString(path));
  if (!s.isOk()) {
    error = QString::fromStdString(s.message());
    return {};
  }
  QFile f(QString::fromStdString(path));
  if (!f.open(QIODevice::ReadOnly)) error = "cannot read " + QString::fromStdString(path);
  return QString::fromUtf8(f.readAll());
}

class ReportSuite : public QObject {
  Q_OBJECT

 private slots:
  void htmlReportIsSelfContained() {
    MainWindow w;
    QVERIFY(openAndWait(w, {runPath("h4k-bs1"), runPath("h4k-bs64")}, true));
    detrace::testing::TempDir dir;
    QString error;
    QString html = exportedHtml(w, dir.file("report.html"), error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
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
    QString error;
    QString html = exportedHtml(w, dir.file("identical.html"), error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY2(html.contains("IDENTICAL: bs1-a and bs1-b"), qPrintable(html.left(400)));
  }

  // Kernel and NVTX names are the program's bytes, not always UTF-8: a pair whose divergence
  // names one is analysed and reported (its JSON with U+FFFD), not left loading for good.
  void namesThatAreNotUtf8AreReported() {
    detrace::testing::TempDir dir;
    std::mt19937 rng{std::random_device{}()};
    const char lone = static_cast<char>(0x80 + rng() % 0x40);  // never valid UTF-8 alone
    const std::string odd = std::string("void caf") + lone + "_kernel(float*)";
    auto write = [&](const std::string& run, const std::string& middle) {
      std::filesystem::create_directories(run);
      db::WriterOptions o;
      o.policy = db::OverflowPolicy::kBlock;
      auto w = db::TraceWriter::create(run + "/proc-1.dtrace", o);
      QVERIFY2(w.isOk(), w.status().message().c_str());
      (*w)->setRank({0, 1, 0, 0, 1, "test", "NVIDIA H200", ""});
      const int64_t stream = (*w)->stream(7, 0);
      const int64_t k = (*w)->intern("void fill_kernel<float>(float*)");
      const int64_t m = (*w)->intern(middle);
      int64_t t = 1000000;
      (void)(*w)->append(kernelAt(k, stream, t += 1000));
      (void)(*w)->append(kernelAt(m, stream, t += 1000));
      (void)(*w)->append(kernelAt(k, stream, t += 1000));
      QVERIFY((*w)->close().isOk());
    };
    const std::string a = dir.file("a"), b = dir.file("b");
    write(a, odd);  // the op in A at the divergence: the report names it
    write(b, "void plain_kernel(float*)");
    MainWindow w;
    QVERIFY2(openAndWait(w, {QString::fromStdString(a), QString::fromStdString(b)}, true),
             "the analysis and its views came");
    QString error;
    QString html = exportedHtml(w, dir.file("odd.html"), error);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY2(html.contains("DIVERGENT"), qPrintable(html.left(400)));
    QVERIFY2(html.contains(QString::fromUtf8("void caf\xEF\xBF\xBD_kernel")), qPrintable(html.left(1600)));
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
