// The tensors view on synthetic runs whose GEMM output bytes were captured (TraceWriter with
// Operand.capture): per-row strip, ULP heatmap and histogram; and the operand comparison itself.
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QSignalSpy>
#include <QTest>

#include "gui_test_util.h"
#include "suites.h"
#include "tensor_view.h"

namespace detrace::gui::testing {
namespace {

constexpr int64_t kRows = 4, kCols = 8;

std::vector<uint16_t> ones() { return std::vector<uint16_t>(kRows * kCols, bf16(1.0f)); }

class TensorsSuite : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    std::vector<uint16_t> b = ones();
    b[1 * kCols + 2] += 1;   // 1 ULP
    b[3 * kCols + 7] += 16;  // 16 ULP
    writeCapturedRun(dir_.file("a"), kRows, kCols, ones());
    writeCapturedRun(dir_.file("b"), kRows, kCols, b);
  }

  void ulpDiffOfCapturedOperands() {
    auto a = db::Run::open(dir_.file("a"));
    auto b = db::Run::open(dir_.file("b"));
    QVERIFY(a.isOk() && b.isOk());
    auto pair = loadTensorPair(*a, *b, 0, 3, 3, false);
    QVERIFY2(pair.isOk(), pair.isOk() ? "" : pair.status().message().c_str());
    const auto& ops = (*pair)->operands;
    QCOMPARE(ops.size(), size_t{3});
    for (int i = 0; i < 2; ++i) {  // inputs: equal everywhere
      QVERIFY(ops[i].ulp);
      QCOMPARE(ops[i].ulp->differing, int64_t{0});
      QCOMPARE(ops[i].rows_differing, int64_t{0});
      QCOMPARE(*ops[i].digest_equal, true);
    }
    const OperandPair& d = ops[2];
    QCOMPARE(d.name, QString("D"));
    QVERIFY(d.ulp);
    QCOMPARE(d.ulp->rows, kRows);
    QCOMPARE(d.ulp->cols, kCols);
    QCOMPARE(d.ulp->differing, int64_t{2});
    QCOMPARE(d.ulp->max_ulp, uint64_t{16});
    QCOMPARE(d.ulp->ulps[1 * kCols + 2], uint64_t{1});
    QCOMPARE(d.ulp->ulps[3 * kCols + 7], uint64_t{16});
    QCOMPARE(d.histogram, (std::vector<int64_t>{30, 1, 0, 0, 0, 1}));
    QCOMPARE(d.rows,
             (std::vector<replay::RowState>{replay::RowState::kEqual, replay::RowState::kDiffer,
                                            replay::RowState::kEqual, replay::RowState::kDiffer}));
    QCOMPARE(d.rows_differing, int64_t{2});
  }

  void viewShowsStripHeatmapAndHistogram() {
    auto a = db::Run::open(dir_.file("a"));
    auto b = db::Run::open(dir_.file("b"));
    TensorView view;
    view.resize(1000, 800);
    view.show();
    view.setRuns(*a, *b, false);
    QSignalSpy loaded(&view, &TensorView::loaded);
    view.showPair(0, 3, 3);
    QVERIFY(loaded.wait(10000));
    QCOMPARE(view.currentOperand(), 2);  // the operand that differs is picked
    QCOMPARE(view.model()->index(2, OperandsModel::kRows).data().toString(),
             QString("2 of 4 differ"));
    QCOMPARE(view.model()->index(2, OperandsModel::kUlp).data().toString(),
             QString("max 16 ULP, 2 elements differ"));
    QCOMPARE(view.strip()->rows().size(), size_t{4});
    const QImage& heat = view.heatmap()->image();
    QCOMPARE(heat.size(), QSize(kCols, kRows));
    for (int y = 0; y < kRows; ++y) {
      for (int x = 0; x < kCols; ++x) {
        bool differs = (y == 1 && x == 2) || (y == 3 && x == 7);
        QCOMPARE(heat.pixelColor(x, y) != QColor(Qt::white), differs);
      }
    }
    QVERIFY(heat.pixelColor(7, 3) != heat.pixelColor(2, 1));  // 16 ULP is darker than 1 ULP
    auto* series = qobject_cast<QBarSeries*>(view.histogram()->chart()->series().value(0));
    QVERIFY(series);
    QBarSet* set = series->barSets().value(0);
    QCOMPARE(set->count(), 6);
    QCOMPARE(set->at(0), 30.0);
    QCOMPARE(set->at(1), 1.0);
    QCOMPARE(set->at(5), 1.0);
    // The strip paints the differing rows red.
    QImage strip = view.strip()->renderImage(QSize(400, 60));
    QCOMPARE(strip.pixelColor(50, 30), QColor(120, 190, 120));  // row 0 equal
    QCOMPARE(strip.pixelColor(150, 30), QColor(215, 40, 40));   // row 1 differs
  }

  void rowsByContentFindTheRequestInALargerBatch() {
    db::Operand small, large;
    small.row_digests = {7, 9};
    large.row_digests = {1, 7, 3, 9, 5};
    auto rows = replay::compareRowDigests(small, large, true);
    QCOMPARE(rows,
             (std::vector<replay::RowState>{replay::RowState::kEqual, replay::RowState::kEqual}));
    large.row_digests[3] = 8;
    rows = replay::compareRowDigests(small, large, true);
    QCOMPARE(rows[1], replay::RowState::kDiffer);
    rows = replay::compareRowDigests(small, large, false);  // by position: 7 vs 1, 9 vs 7
    QCOMPARE(rows,
             (std::vector<replay::RowState>{replay::RowState::kDiffer, replay::RowState::kDiffer}));
  }

  void ulpAcrossZeroAndNaN() {
    auto bits = [](std::initializer_list<uint16_t> v) {
      std::vector<uint8_t> out(v.size() * 2);
      std::memcpy(out.data(), std::data(v), out.size());
      return out;
    };
    // +0 vs -0: 0 ULP; smallest +subnormal vs smallest -subnormal: 2 ULP; NaN vs 1.0: "infinite".
    auto a = bits({0x0000, 0x0001, 0x7FC0});
    auto b = bits({0x8000, 0x8001, 0x3F80});
    auto d = replay::ulpDiff(a, b, db::DType::kBF16, 0);
    QVERIFY(d.isOk());
    QCOMPARE(d->ulps[0], uint64_t{0});
    QCOMPARE(d->ulps[1], uint64_t{2});
    QCOMPARE(d->ulps[2], UINT64_MAX);
    QVERIFY(!replay::ulpDiff(a, bits({0}), db::DType::kBF16, 0).isOk());
    QVERIFY(!replay::ulpDiff(a, b, db::DType::kI32, 0).isOk());
  }

 private:
  detrace::testing::TempDir dir_;
};

}  // namespace

std::unique_ptr<QObject> makeTensorsSuite() { return std::make_unique<TensorsSuite>(); }

}  // namespace detrace::gui::testing

#include "tensors_test.moc"
