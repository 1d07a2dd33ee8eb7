// `detrace diff` speed: two generated runs of N events of realistic shape (a decoder's step: per
// layer a norm kernel, 4 GEMMs with fingerprinted operands and their kernels, elementwise kernels,
// an all-reduce with its kernel), identical except for one planted nondeterministic GEMM output
// near the end. Times diffRuns (load, align, classify) over several trials and reports the median
// and the process's peak RSS. Usage: bench_diff [events=1000000] [trials=3] [dir=/tmp] [keep]
// With `keep`, the runs are written to DIR/bench_diff_EVENTS and kept, and reused when they exist
// (for measuring repeatedly without writing them again).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "../common/generated_run.h"
#include "detrace/replay/diff.h"

using namespace detrace;

namespace {

void writeRun(const std::string& dir, int64_t events, int64_t plant) {
  bench::writeGeneratedRun(dir, events, plant);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t events = argc > 1 ? std::stoll(argv[1]) : 1'000'000;
  int trials = argc > 2 ? std::stoi(argv[2]) : 3;
  const bool keep = argc > 4 && std::string(argv[4]) == "keep";
  std::string base = keep ? fmt::format("{}/bench_diff_{}", argc > 3 ? argv[3] : "/tmp", events)
                          : fmt::format("{}/bench_diff_{}", argc > 3 ? argv[3] : "/tmp", getpid());
  int64_t gemms = events / 8;
  if (!keep || !std::filesystem::exists(base + "/b")) {
    writeRun(base + "/a", events, -1);
    writeRun(base + "/b", events, gemms - gemms / 10);  // diverges 90% of the way in
  }
  auto a = db::Run::open(base + "/a");
  auto b = db::Run::open(base + "/b");
  if (!a.isOk() || !b.isOk()) return 2;
  std::vector<double> seconds;
  int64_t first = -1;
  for (int t = 0; t < trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    auto d = replay::diffRuns(*a, *b);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!d.isOk() || d->identical()) {
      fmt::print(stderr, "bench_diff: the planted divergence was not found\n");
      return 2;
    }
    first = d->ranks[0].first->a;
  }
  if (!keep) std::filesystem::remove_all(base);
  std::sort(seconds.begin(), seconds.end());
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  fmt::print("{:<24} {:>10} {:>8} {:>12} {:>14} {:>16}\n", "benchmark", "events", "trials",
             "median s", "peak RSS MiB", "first divergence");
  fmt::print("{:<24} {:>10} {:>8} {:>12.3f} {:>14.0f} {:>16}\n", "diff two runs (1 rank)", events,
             trials, seconds[seconds.size() / 2], static_cast<double>(ru.ru_maxrss) / 1024.0, first);
  fmt::print("(targets: 1M events under 2 s and under 1 GB)\n");
  return 0;
}
