// QAbstractItemModelTester on every model, filled from real analyses, and the AlignedRows index
// against the RankDiff it was built from.
#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QTest>
#include <set>

#include "gui_test_util.h"
#include "suites.h"

namespace detrace::gui::testing {
namespace {

using Tester = QAbstractItemModelTester;
constexpr auto kQtTest = QAbstractItemModelTester::FailureReportingMode::QtTest;

class ModelsSuite : public QObject {
  Q_OBJECT

 private slots:
  void everyModelPassesTheTester() {
    MainWindow window;
    Tester t1(window.summaryModel(), kQtTest);
    Tester t2(window.events()->model(), kQtTest);
    Tester t3(window.selectionModel(), kQtTest);
    Tester t4(window.groupsModel(), kQtTest);
    Tester t5(window.tensors()->model(), kQtTest);
    Tester t6(window.replay()->model(), kQtTest);
    QVERIFY(openAndWait(window, {runPath("h4k-bs1"), runPath("h4k-bs64")}, /*plots=*/true));
    QVERIFY(window.selectionModel()->rowCount() > 0);
    QVERIFY(window.tensors()->model()->rowCount() > 0);
    // Walk every row of the events model (fetches blocks), then filter and unfilter it.
    auto* events = window.events()->model();
    for (int r = 0; r < events->rowCount(); ++r)
      (void)events->index(r, AlignedEventsModel::kNameA).data();
    QSignalSpy filtered(window.events(), &EventsView::filterApplied);
    EventFilter f;
    f.statuses = {static_cast<int>(replay::PairStatus::kKernelSelection)};
    window.events()->setFilter(f);
    QVERIFY(filtered.wait(10000));
    QVERIFY(events->rowCount() > 0);
    window.events()->setFilter({});
    QCOMPARE(filtered.count(), 2);
    QVERIFY(openAndWait(
        window, {runPath("bs1-a"), runPath("nondet-a"), runPath("bs1-b"), runPath("nondet-b")}));
    QCOMPARE(window.groupsModel()->rowCount(), 3);
  }

  void alignedRowsCoverEverySeqOnceInOrder() {
    const std::pair<const char*, const char*> pairs[] = {
        {"nondet-a", "nondet-b"}, {"h4k-bs1", "h4k-bs64"}, {"bs1-a", "nondet-a"}};
    for (auto [a, b] : pairs) {
      auto run_a = db::Run::open(runPath(a).toStdString());
      auto run_b = db::Run::open(runPath(b).toStdString());
      QVERIFY(run_a.isOk() && run_b.isOk());
      auto diff = replay::diffRuns(*run_a, *run_b);
      QVERIFY(diff.isOk());
      for (const replay::RankDiff& rd : diff->ranks) {
        replay::AlignedRows rows(rd);
        int64_t next_a = 0, next_b = 0;
        std::set<std::pair<int64_t, int64_t>> differing;
        for (const replay::PairDiff& d : rd.differing) differing.insert({d.a, d.b});
        int64_t seen_differing = 0;
        for (int64_t r = 0; r < rows.size(); ++r) {
          replay::AlignedRow p = rows.at(r);
          if (p.a >= 0) {
            QCOMPARE(p.a, next_a++);
            QCOMPARE(rows.rowOfA(p.a), r);
          }
          if (p.b >= 0) {
            QCOMPARE(p.b, next_b++);
            QCOMPARE(rows.rowOfB(p.b), r);
          }
          QVERIFY(p.a >= 0 || p.b >= 0);
          bool is_differing = differing.count({p.a, p.b}) > 0;
          QCOMPARE(p.status != replay::PairStatus::kIdentical, is_differing);
          seen_differing += is_differing;
        }
        QCOMPARE(next_a, rd.events_a);
        QCOMPARE(next_b, rd.events_b);
        QCOMPARE(seen_differing, static_cast<int64_t>(rd.differing.size()));
        QCOMPARE(rows.differingRows().size(), rd.differing.size());
      }
    }
  }
};

}  // namespace

std::unique_ptr<QObject> makeModelsSuite() { return std::make_unique<ModelsSuite>(); }

}  // namespace detrace::gui::testing

#include "models_test.moc"
