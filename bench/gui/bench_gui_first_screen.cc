// detrace-view's first screen on large runs: two generated runs of N events of realistic shape (the
// same decoder-step shape as bench_diff: norm and elementwise kernels, GEMMs with fingerprinted
// operands and their kernels; GPU times on two streams), identical but for one nondeterministic
// GEMM output 90% of the way in. Under QT_QPA_PLATFORM=offscreen, each trial opens both runs in a
// fresh MainWindow and measures, from openRuns():
//   first screen   the aligned-events tab with its first rows populated (kind, name, detail and
//                  GPU time of both runs' events, paired by position until the analysis lands)
//   summaries      the Runs tab filled (replay::summarize of every rank: counts by kind, span)
//   verdict        the analysis shown (verdict, aligned rows, kernel selection)
//   deep scroll    after the verdict, selecting row N/2 until its events are populated
// One warm-up trial, then the median of `trials`. Usage: bench_gui_first_screen [events] [trials]
// [dir]
#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QTimer>
#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "detrace/db/writer.h"
#include "../common/generated_run.h"

#include "main_window.h"

using namespace detrace;

namespace {

// The runs: two streams and 800 ns kernels, so the timeline has something to draw.
void writeRun(const std::string& dir, int64_t events, int64_t plant) {
  bench::writeGeneratedRun(dir, events, plant, bench::RunShape{"NVIDIA H200", 2, 800});
}

// Runs the event loop until `signal` of `sender` fires; returns elapsed ms since `clock` started.
template <typename Sender, typename Signal>
double waitFor(Sender* sender, Signal signal, const QElapsedTimer& clock, int timeout_ms = 120000) {
  QEventLoop loop;
  QObject::connect(sender, signal, &loop, &QEventLoop::quit);
  QTimer::singleShot(timeout_ms, &loop, &QEventLoop::quit);
  loop.exec();
  return static_cast<double>(clock.nsecsElapsed()) / 1e6;
}

struct Trial {
  double first_screen_ms, summaries_ms, verdict_ms, deep_scroll_ms;
};

Trial runTrial(const QStringList& paths) {
  gui::MainWindow window;
  window.show();
  QElapsedTimer clock;
  clock.start();
  bool first = false, verdict = false;
  double summaries_ms = -1;
  QObject::connect(&window, &gui::MainWindow::firstScreenShown, [&] { first = true; });
  QObject::connect(&window, &gui::MainWindow::runsShown,
                   [&] { summaries_ms = static_cast<double>(clock.nsecsElapsed()) / 1e6; });
  QObject::connect(&window, &gui::MainWindow::analysisShown, [&] { verdict = true; });
  window.openRuns(paths);
  Trial t{};
  t.first_screen_ms = first ? 0 : waitFor(&window, &gui::MainWindow::firstScreenShown, clock);
  t.verdict_ms =
      verdict ? t.first_screen_ms : waitFor(&window, &gui::MainWindow::analysisShown, clock);
  if (summaries_ms < 0) waitFor(&window, &gui::MainWindow::runsShown, clock);
  t.summaries_ms = summaries_ms;
  auto* model = window.events()->model();
  if (!first || !verdict || model->rowCount() == 0) {
    fmt::print(stderr, "bench_gui_first_screen: the window did not finish loading\n");
    std::exit(2);
  }
  // Deep scroll: select the middle row; wait until its events arrive.
  const int row = model->rowCount() / 2;
  QElapsedTimer scroll;
  scroll.start();
  window.events()->jumpToAlignedRow(model->alignedRow(row));
  while (model->index(row, gui::AlignedEventsModel::kNameA).data().toString() == "…" ||
         !model->index(row, gui::AlignedEventsModel::kNameA).data().isValid()) {
    waitFor(model, &QAbstractItemModel::dataChanged, scroll, 5000);
  }
  t.deep_scroll_ms = static_cast<double>(scroll.nsecsElapsed()) / 1e6;
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  int64_t events = argc > 1 ? std::stoll(argv[1]) : 1'000'000;
  int trials = argc > 2 ? std::stoi(argv[2]) : 5;
  std::string base = fmt::format("{}/bench_gui_{}", argc > 3 ? argv[3] : "/tmp", getpid());
  int64_t gemms = events / 8;
  writeRun(base + "/a", events, -1);
  writeRun(base + "/b", events, gemms - gemms / 10);
  const QStringList paths = {QString::fromStdString(base + "/a"),
                             QString::fromStdString(base + "/b")};
  (void)runTrial(paths);  // warm-up: page cache, fonts, thread pool
  std::vector<double> first, summaries, verdict, scroll;
  for (int i = 0; i < trials; ++i) {
    Trial t = runTrial(paths);
    first.push_back(t.first_screen_ms);
    summaries.push_back(t.summaries_ms);
    verdict.push_back(t.verdict_ms);
    scroll.push_back(t.deep_scroll_ms);
  }
  std::filesystem::remove_all(base);
  fmt::print("{:<34} {:>10} {:>8} {:>12}\n", "benchmark (detrace-view, offscreen)", "events",
             "trials", "median ms");
  fmt::print("{:<34} {:>10} {:>8} {:>12.1f}\n", "open -> first screen", events, trials,
             median(first));
  fmt::print("{:<34} {:>10} {:>8} {:>12.1f}\n", "open -> run summaries shown", events, trials,
             median(summaries));
  fmt::print("{:<34} {:>10} {:>8} {:>12.1f}\n", "open -> verdict shown", events, trials,
             median(verdict));
  fmt::print("{:<34} {:>10} {:>8} {:>12.1f}\n", "select row N/2 -> rows populated", events, trials,
             median(scroll));
  fmt::print("(target: first screen under 1000 ms)\n");
  return median(first) < 1000 ? 0 : 1;
}
