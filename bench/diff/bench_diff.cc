// `detrace diff` speed and memory: two generated runs of N events of realistic shape (a decoder's
// step: per layer a norm kernel, 4 GEMMs with fingerprinted operands and their kernels,
// elementwise kernels, an all-reduce with its kernel), identical except for one planted
// nondeterministic GEMM output 90% of the way in. Times diffRuns (read, align, classify) with the
// options `detrace diff` uses, after one warm-up diff, and reports the median and the process's
// peak RSS. The runs are written by a child process, so the peak is the diff's alone.
//
// Usage: bench_diff [--events N] [--trials T] [--dir DIR] [--keep] [--chunk N] [--rows]
//   --keep   write the runs to DIR/bench_diff_N and keep them; reuse them when they exist
//   --chunk  DiffOptions::chunk_events (default kDiffChunkEvents)
//   --rows   keep every differing pair (DiffOptions::keep_differing, the viewer's mode)
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "detrace/db/run.h"
#include "detrace/replay/diff.h"

#include "../common/generated_run.h"

using namespace detrace;

namespace {

struct Args {
  int64_t events = 1'000'000;
  int trials = 5;
  std::string dir = "/tmp";
  bool keep = false;
  replay::DiffOptions diff;
};

Args parse(int argc, char** argv) {
  Args a;
  a.diff.keep_differing = false;  // as `detrace diff`
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "bench_diff: {} needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--events") {
      a.events = std::stoll(value());
    } else if (flag == "--trials") {
      a.trials = std::max(1, std::stoi(value()));
    } else if (flag == "--dir") {
      a.dir = value();
    } else if (flag == "--keep") {
      a.keep = true;
    } else if (flag == "--chunk") {
      a.diff.chunk_events = std::stoll(value());
    } else if (flag == "--rows") {
      a.diff.keep_differing = true;
    } else {
      fmt::print(stderr,
                 "usage: bench_diff [--events N] [--trials T] [--dir DIR] [--keep] "
                 "[--chunk N] [--rows]\n");
      std::exit(2);
    }
  }
  return a;
}

// Writes the two runs in a child process: the writer's memory stays out of this one's peak RSS.
void writeRuns(const std::string& base, int64_t events) {
  pid_t pid = fork();
  if (pid == 0) {
    int64_t gemms = events / 8;
    bench::writeGeneratedRun(base + "/a", events, -1);
    bench::writeGeneratedRun(base + "/b", events, gemms - gemms / 10);  // 90% of the way in
    std::_Exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    fmt::print(stderr, "bench_diff: writing the runs failed\n");
    std::exit(2);
  }
}

// One diff: its duration in seconds, and the planted divergence's seq (-1 if it was missed).
std::pair<double, int64_t> diffOnce(const db::Run& a, const db::Run& b, const Args& args,
                                    int64_t& peak_window) {
  auto t0 = std::chrono::steady_clock::now();
  auto d = replay::diffRuns(a, b, args.diff);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!d.isOk() || d->identical()) return {s, -1};
  peak_window = d->ranks[0].peak_window;
  return {s, d->ranks[0].first->a};
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  std::string base =
      fmt::format("{}/bench_diff_{}", args.dir,
                  args.keep ? std::to_string(args.events) : std::to_string(getpid()));
  if (!args.keep || !std::filesystem::exists(base + "/b")) writeRuns(base, args.events);
  auto a = db::Run::open(base + "/a");
  auto b = db::Run::open(base + "/b");
  if (!a.isOk() || !b.isOk()) return 2;
  int64_t first = -1, peak_window = 0;
  std::vector<double> seconds;
  for (int t = 0; t <= args.trials; ++t) {  // trial 0 warms the page cache up
    auto [s, seq] = diffOnce(*a, *b, args, peak_window);
    if (seq < 0) {
      fmt::print(stderr, "bench_diff: the planted divergence was not found\n");
      return 2;
    }
    first = seq;
    if (t > 0) seconds.push_back(s);
  }
  if (!args.keep) std::filesystem::remove_all(base);
  std::sort(seconds.begin(), seconds.end());
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  fmt::print("{:<26} {:>10} {:>7} {:>10} {:>10} {:>13} {:>13} {:>11}\n", "benchmark", "events",
             "trials", "median s", "min s", "peak RSS MiB", "window events", "first div.");
  fmt::print("{:<26} {:>10} {:>7} {:>10.3f} {:>10.3f} {:>13.0f} {:>13} {:>11}\n",
             args.diff.keep_differing ? "diff, every differing row" : "diff (as `detrace diff`)",
             args.events, args.trials, seconds[seconds.size() / 2], seconds.front(),
             static_cast<double>(ru.ru_maxrss) / 1024.0, peak_window, first);
  fmt::print("(targets: 1M events under 2 s and under 1 GB; memory bounded for longer runs)\n");
  return 0;
}
