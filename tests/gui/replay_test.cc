// The Replay tab through its seam: a fake backend shows progress and results, cancel drops the
// result, an unavailable backend says why; the library backend answers on a real run, and replays
// the committed synthetic run with captured operands (tests/data/replay/synth) on the CPU, giving
// the results `detrace replay --no-gpu` gives (tests/data/replay/golden).
#include "detrace/replay/replay.h"

#include <QCheckBox>
#include <QFile>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>
#include <atomic>
#include <optional>
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

QString synthPath() { return QString("%1/replay/synth").arg(DETRACE_TEST_DATA_DIR); }

QString golden(const char* name) {
  QFile f(QString("%1/replay/golden/%2.txt").arg(DETRACE_TEST_DATA_DIR, name));
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// The report's lines from the results table on (the first line names the run by its path, which
// differs between the CLI's relative "synth" and the viewer's absolute path).
QString fromTable(const QString& report) {
  qsizetype at = report.indexOf("\nrecorded output");
  return at < 0 ? QString() : report.mid(at).trimmed();
}

// One row of the results table, by the model's display strings.
struct Shown {
  QString impl, device, result, matches, to_recorded, to_reference, batch_rows;
  int runs = -1, distinct = -1;
};

Shown shownRow(ReplayResultsModel* m, int row) {
  auto at = [&](int col) { return m->index(row, col).data(); };
  return {at(ReplayResultsModel::kImpl).toString(),
          at(ReplayResultsModel::kDevice).toString(),
          at(ReplayResultsModel::kResult).toString(),
          at(ReplayResultsModel::kMatches).toString(),
          at(ReplayResultsModel::kToRecorded).toString(),
          at(ReplayResultsModel::kToReference).toString(),
          at(ReplayResultsModel::kBatchRows).toString(),
          at(ReplayResultsModel::kRuns).toInt(),
          at(ReplayResultsModel::kDistinct).toInt()};
}

int rowOf(ReplayResultsModel* m, const QString& impl) {
  for (int r = 0; r < m->rowCount(); ++r)
    if (m->rows()[static_cast<size_t>(r)].impl == impl) return r;
  return -1;
}

// A panel over the real library backend on the synthetic run (as both A and B), CPU only.
struct SynthPanel {
  std::optional<db::Run> run;
  ReplayPanel panel;
  QCheckBox* cpu_only = nullptr;
  QPlainTextEdit* report = nullptr;
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

  // Event 7 of the synthetic run is a GEMM (m=64 n=8 k=64 bf16->f32) whose D was captured; its
  // recorded output was made with the CPU fp32 GEMM, so cpu-fp32 reproduces it and fp64 does not
  // (golden/gemm.txt). The GPU implementations are skipped: the CI machine has no GPU.
  void libraryBackendReplaysACapturedGemmOnTheCpu() {
    SynthPanel s;
    if (!openSynth(s)) return;
    s.panel.setEvent(0, 7, -1, /*batch=*/false);
    QVERIFY(runPanel(s.panel));
    ReplayResultsModel* m = s.panel.model();
    QVERIFY2(
        s.panel.statusText().startsWith("Replayed: GEMM cublasLtMatmul m=64 n=8 k=64 TN bf16->f32"),
        qPrintable(s.panel.statusText()));
    const QStringList gpu = {"recorded", "cublaslt-heuristic", "cublaslt-pinned",
                             "wgmma",    "mma-sync",           "planted-splitk"};
    QCOMPARE(m->rowCount(), static_cast<int>(gpu.size()) + 2);
    for (int r = 0; r < static_cast<int>(gpu.size()); ++r) {
      Shown g = shownRow(m, r);
      QCOMPARE(m->rows()[static_cast<size_t>(r)].impl, gpu[r]);
      QCOMPARE(g.device, QString("GPU"));
      QCOMPARE(g.result, QString("skipped: --no-gpu"));
      QCOMPARE(g.runs, 0);
      QCOMPARE(g.matches, QString("—"));
    }
    QCOMPARE(shownRow(m, 5).impl, QString("planted-splitk (control)"));

    Shown cpu = shownRow(m, 6);
    QCOMPARE(cpu.impl, QString("cpu-fp32"));
    QCOMPARE(cpu.device, QString("CPU"));
    QCOMPARE(cpu.result, QString("reproduces the recorded output, deterministic"));
    QCOMPARE(cpu.runs, 3);
    QCOMPARE(cpu.distinct, 1);
    QCOMPARE(cpu.matches, QString("3/3"));
    QCOMPARE(cpu.to_recorded, QString("0 ULP (bit-identical)"));
    QVERIFY2(cpu.to_reference.startsWith("max 32 ULP, "), qPrintable(cpu.to_reference));

    Shown fp64 = shownRow(m, 7);
    QCOMPARE(fp64.impl, QString("fp64"));
    QCOMPARE(fp64.device, QString("CPU"));
    QCOMPARE(fp64.result, QString("does not reproduce the recorded output, deterministic"));
    QCOMPARE(fp64.runs, 1);  // the reference runs once
    QCOMPARE(fp64.distinct, 1);
    QCOMPARE(fp64.matches, QString("0/1"));
    QVERIFY2(fp64.to_recorded.startsWith("max 32 ULP, "), qPrintable(fp64.to_recorded));
    QCOMPARE(fp64.to_reference, QString("0 ULP (bit-identical)"));

    // The report under the table is the one `detrace replay synth --event 7 --no-gpu` prints.
    const QString expected = fromTable(golden("gemm"));
    QVERIFY2(!expected.isEmpty(), "tests/data/replay/golden/gemm.txt is missing or changed form");
    QCOMPARE(fromTable(s.report->toPlainText()), expected);
  }

  // Event 2 is an AllReduce (3 ranks, f32 sum) whose recv buffer was captured; it was reduced in
  // ring order from rank 2, so of the CPU twins only ring2/cpu reproduces it
  // (golden/allreduce.txt). The implementation field selects the CPU ones by their group name.
  void libraryBackendReplaysACapturedAllReduceOnTheCpu() {
    SynthPanel s;
    if (!openSynth(s)) return;
    s.panel.setEvent(0, 2, -1, false);
    // The panel's own fields (direct children: a spin box holds a line edit of its own).
    auto* impls = s.panel.findChild<QLineEdit*>(QString(), Qt::FindDirectChildrenOnly);
    QVERIFY(impls);
    impls->setText("cpu");
    const auto spins = s.panel.findChildren<QSpinBox*>(QString(), Qt::FindDirectChildrenOnly);
    QCOMPARE(spins.size(), 4);  // rank, event in A, event in B, runs of each
    auto* repeat = spins.last();
    QCOMPARE(repeat->value(), 3);
    repeat->setValue(4);
    QVERIFY(runPanel(s.panel));
    ReplayResultsModel* m = s.panel.model();
    QVERIFY2(s.panel.statusText().startsWith("Replayed: AllReduce f32 count=256 sum on 3 rank(s)"),
             qPrintable(s.panel.statusText()));
    // Only CPU implementations were asked for: no GPU row at all.
    QStringList names;
    for (const ReplayRow& r : m->rows()) names << r.impl;
    QCOMPARE(names, QStringList({"rank/cpu", "reversed/cpu", "ring2/cpu", "fp64"}));
    for (int r = 0; r < m->rowCount(); ++r) {
      Shown row = shownRow(m, r);
      QCOMPARE(row.device, QString("CPU"));
      QCOMPARE(row.distinct, 1);
      QCOMPARE(row.runs, names[r] == "fp64" ? 1 : 4);
    }
    Shown ring2 = shownRow(m, rowOf(m, "ring2/cpu"));
    QCOMPARE(ring2.result, QString("reproduces the recorded output, deterministic"));
    QCOMPARE(ring2.matches, QString("4/4"));
    QCOMPARE(ring2.to_recorded, QString("0 ULP (bit-identical)"));
    QVERIFY2(ring2.to_reference.startsWith("max 4 ULP, "), qPrintable(ring2.to_reference));
    for (const char* other : {"rank/cpu", "reversed/cpu"}) {
      Shown row = shownRow(m, rowOf(m, other));
      QCOMPARE(row.result, QString("does not reproduce the recorded output, deterministic"));
      QCOMPARE(row.matches, QString("0/4"));
      QVERIFY2(row.to_recorded.startsWith("max 12 ULP, "), qPrintable(row.to_recorded));
    }
    Shown fp64 = shownRow(m, rowOf(m, "fp64"));
    QCOMPARE(fp64.matches, QString("0/1"));
    QVERIFY2(fp64.to_recorded.startsWith("max 4 ULP, "), qPrintable(fp64.to_recorded));
    QVERIFY(s.report->toPlainText().contains("reproduced by     ring2/cpu\n"));
  }

  // Events 1 (n=4, split-K 2) and 7 (n=8, split-K 1) are the same GEMM at two batch sizes: the
  // recorded kernels disagree on the request's rows, the CPU implementations are batch-invariant,
  // and only event 7's recorded output is reproduced by cpu-fp32 (golden/pair_gemm.txt).
  void libraryBackendReplaysABatchSizePairOnTheCpu() {
    SynthPanel s;
    if (!openSynth(s)) return;
    s.panel.setEvent(0, 1, 7, /*batch=*/true);
    QVERIFY(runPanel(s.panel));
    ReplayResultsModel* m = s.panel.model();
    QVERIFY2(s.panel.statusText().contains("  vs  "), qPrintable(s.panel.statusText()));
    QCOMPARE(m->rowCount(), 8);
    for (int r = 0; r < 6; ++r) {
      Shown g = shownRow(m, r);
      QCOMPARE(g.device, QString("GPU"));
      QCOMPARE(g.batch_rows, QString("skipped: --no-gpu"));
    }
    // The rows are run A's (event 1): there cpu-fp32 does not reproduce the recorded output.
    Shown cpu = shownRow(m, rowOf(m, "cpu-fp32"));
    QCOMPARE(cpu.result, QString("does not reproduce the recorded output, deterministic"));
    QCOMPARE(cpu.matches, QString("0/3"));
    QCOMPARE(cpu.distinct, 1);
    QVERIFY2(cpu.to_recorded.startsWith("max 32 ULP, "), qPrintable(cpu.to_recorded));
    QCOMPARE(cpu.batch_rows, QString("4/4 rows equal"));
    Shown fp64 = shownRow(m, rowOf(m, "fp64"));
    QCOMPARE(fp64.matches, QString("0/1"));
    QCOMPARE(fp64.batch_rows, QString("4/4 rows equal"));
    const QString report = s.report->toPlainText();
    QVERIFY(
        report.contains("recorded outputs  0 of 4 request row(s) bit-identical between A and B"));
    QVERIFY(report.contains("batch-invariant   cpu-fp32, fp64\n"));
    // Run B's table (event 7) is in the report: there cpu-fp32 reproduces the recorded output.
    QVERIFY(report.contains("reproduced by     cpu-fp32\n"));
  }

 private:
  // Opens the synthetic run into the panel with the real backend, ticks "CPU implementations
  // only"; false (the test skipped or failed) when that is not possible.
  bool openSynth(SynthPanel& s) {
    if (!replay::replayAvailable()) {
      QTest::qSkip(
          "this build has no kernels/ (CUDA 13 not found): the library backend cannot "
          "replay",
          __FILE__, __LINE__);
      return false;
    }
    auto run = db::Run::open(synthPath().toStdString());
    if (!run.isOk()) {
      QTest::qFail(run.status().message().c_str(), __FILE__, __LINE__);
      return false;
    }
    s.run.emplace(std::move(*run));
    s.panel.setBackend(makeLibraryReplayBackend(*s.run, *s.run));
    s.cpu_only = s.panel.findChild<QCheckBox*>(QString(), Qt::FindDirectChildrenOnly);
    s.report = s.panel.findChild<QPlainTextEdit*>(QString(), Qt::FindDirectChildrenOnly);
    if (!s.cpu_only || !s.report || s.cpu_only->text() != "CPU implementations only") {
      QTest::qFail("the panel has no CPU-only checkbox or report", __FILE__, __LINE__);
      return false;
    }
    s.cpu_only->setChecked(true);
    return true;
  }

  // Runs the replay through the panel's worker and waits for its result (generously: the CI
  // machine is loaded).
  static bool runPanel(ReplayPanel& panel) {
    QSignalSpy finished(&panel, &ReplayPanel::finished);
    panel.start();
    if (!panel.running()) return false;
    if (finished.count() == 0 && !finished.wait(60000)) return false;
    if (!finished[0][0].toBool()) qWarning("replay failed: %s", qPrintable(panel.statusText()));
    return finished[0][0].toBool() && !panel.running();
  }
};

}  // namespace

std::unique_ptr<QObject> makeReplaySuite() { return std::make_unique<ReplaySuite>(); }

}  // namespace detrace::gui::testing

#include "replay_test.moc"
