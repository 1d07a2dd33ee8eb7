// The Replay tab through its seam: a fake backend shows progress and results, cancel drops the
// result, an unavailable backend says why; the library backend answers on a real run.
#include "detrace/replay/replay.h"

#include <QSignalSpy>
#include <QTest>
#include <atomic>
#include <thread>

#include "gui_test_util.h"
#include "suites.h"

namespace detrace::gui::testing {
namespace {

class FakeBackend : public ReplayBackend {
 public:
  bool available(QString* why) const override {
    if (!ok && why) *why = "fake says no";
    return ok;
  }
  ReplayOutcome run(const ReplayRequest& q, const ReplayProgressFn& progress) override {
    last = q;
    for (int i = 0; i < 3; ++i) {
      progress(i, 3, QString("impl %1").arg(i));
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    ReplayOutcome out;
    out.title = "GEMM test";
    out.report = "report text";
    out.rows.push_back({"recorded", "the recorded kernel", "GPU", "reproduces the recorded output",
                        3, 1, "3/3", "0 ULP (bit-identical)", "max 2 ULP", "—", false});
    out.rows.push_back({"planted-splitk", "planted", "GPU", "deterministic", 3, 1, "0/3",
                        "max 4 ULP", "max 6 ULP", "0/1 rows equal", true});
    return out;
  }
  bool ok = true;
  int delay_ms = 20;
  ReplayRequest last;
};

class ReplaySuite : public QObject {
  Q_OBJECT

 private slots:
  void runsInTheBackgroundAndShowsResults() {
    ReplayPanel panel;
    auto fake = std::make_shared<FakeBackend>();
    panel.setBackend(fake);
    panel.setEvent(0, 41, 42, /*batch=*/true);
    QSignalSpy finished(&panel, &ReplayPanel::finished);
    panel.start();
    QVERIFY(panel.running());
    QVERIFY(finished.wait(10000));
    QVERIFY(finished[0][0].toBool());
    QCOMPARE(fake->last.target, ReplayRequest::Target::kPair);
    QCOMPARE(fake->last.seq_a, int64_t{41});
    QCOMPARE(fake->last.seq_b, int64_t{42});
    QCOMPARE(panel.model()->rowCount(), 2);
    QCOMPARE(panel.model()->index(0, ReplayResultsModel::kResult).data().toString(),
             QString("reproduces the recorded output"));
    QCOMPARE(panel.model()->index(1, ReplayResultsModel::kImpl).data().toString(),
             QString("planted-splitk (control)"));
    QCOMPARE(panel.model()->index(1, ReplayResultsModel::kBatchRows).data().toString(),
             QString("0/1 rows equal"));
    QVERIFY(panel.statusText().startsWith("Replayed: GEMM test"));
  }

  void cancelDropsTheResult() {
    ReplayPanel panel;
    auto fake = std::make_shared<FakeBackend>();
    fake->delay_ms = 150;
    panel.setBackend(fake);
    panel.setEvent(0, 5, 5, false);
    QSignalSpy finished(&panel, &ReplayPanel::finished);
    panel.start();
    panel.cancel();
    QCOMPARE(finished.count(), 1);
    QVERIFY(!finished[0][0].toBool());
    QTest::qWait(800);  // the abandoned run ends meanwhile: its result must not show
    QCOMPARE(finished.count(), 1);
    QCOMPARE(panel.model()->rowCount(), 0);
    QVERIFY(panel.statusText().startsWith("Cancelled"));
  }

  void unavailableBackendSaysWhy() {
    ReplayPanel panel;
    auto fake = std::make_shared<FakeBackend>();
    fake->ok = false;
    panel.setBackend(fake);
    QCOMPARE(panel.statusText(), QString("Replay is not available: fake says no"));
  }

  void libraryBackendOnARealRun() {
    auto a = db::Run::open(runPath("nondet-a").toStdString());
    auto b = db::Run::open(runPath("nondet-b").toStdString());
    auto backend = makeLibraryReplayBackend(*a, *b);
    QString why;
    QCOMPARE(backend->available(&why), replay::replayAvailable());
    if (!backend->available(nullptr)) {
      QVERIFY(!why.isEmpty());
      return;
    }
    // These runs captured no operand bytes: replay must say so rather than invent results.
    ReplayRequest q;
    q.rank = 0;
    q.seq_a = 122;
    q.allow_gpu = false;
    ReplayOutcome out = backend->run(q, {});
    QVERIFY2(!out.error.isEmpty() || !out.rows.empty(),
             "the replay returned neither rows nor an error");
  }
};

}  // namespace

std::unique_ptr<QObject> makeReplaySuite() { return std::make_unique<ReplaySuite>(); }

}  // namespace detrace::gui::testing

#include "replay_test.moc"
