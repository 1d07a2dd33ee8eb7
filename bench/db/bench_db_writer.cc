// Sustained TraceWriter throughput for kernel-launch events, the tracer's hot path.
//
// Each trial creates a fresh trace, appends N kernel-launch events from one producer thread (as the
// tracer does from CUPTI callbacks) with realistic, varying fields, closes the trace (so every event
// is committed and the WAL checkpointed) and times append-to-close. Prints the median of the trials
// and the bytes per event on disk. Also times TraceWriter::create of a new file (the schema and the
// WAL set-up), which the tracer does on the thread of the process's first recorded call, while the
// process's other recording threads wait. Usage: bench_db_writer [events=2000000] [trials=5] [dir=/tmp]
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detrace/db/writer.h"

using namespace detrace::db;

namespace {

struct Trial {
  double create_ms;  // TraceWriter::create of a new file
  double seconds;
  double bytes_per_event;
  int64_t dropped;
};

Trial runTrial(const std::string& path, int64_t n, uint32_t seed) {
  WriterOptions options;
  options.overwrite = true;
  options.policy = OverflowPolicy::kBlock;  // measure sustained throughput: never drop
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  const auto created = std::chrono::steady_clock::now();
  auto writer = TraceWriter::create(path, options);
  const double create_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - created).count();
  if (!writer.isOk()) {
    fmt::print(stderr, "{}\n", writer.status().message());
    std::exit(2);
  }
  TraceWriter& w = **writer;
  // A realistic vocabulary: a few hundred distinct kernel names and a handful of streams.
  std::vector<int64_t> names;
  for (int i = 0; i < 300; ++i) {
    names.push_back(w.intern(fmt::format("void at::native::kernel_{}<float, 128, 4>(float*, int)", i)));
  }
  std::vector<int64_t> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(w.stream(0x7f0000 + i * 16, 0));
  std::mt19937 rng(seed);
  auto t0 = std::chrono::steady_clock::now();
  int64_t ns = 1'700'000'000'000'000'000;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r = rng();
    Event e;
    e.kind = EventKind::kKernel;
    e.name = names[r % names.size()];
    e.stream = streams[(r >> 9) % streams.size()];
    e.device = 0;
    ns += 800 + (r & 1023);
    e.cpu_ns = ns;
    e.gpu_start_ns = ns + 5000;
    e.gpu_end_ns = ns + 5000 + (r >> 20);
    e.correlation_id = i + 1;
    e.has_launch = true;
    e.launch.grid = {static_cast<int32_t>(1 + (r & 4095)), 1, 1};
    e.launch.block = {128 << (r & 3), 1, 1};
    e.launch.smem_static = 0;
    e.launch.smem_dynamic = static_cast<int32_t>((r >> 12) & 0xff) * 256;
    e.launch.registers = 32 + static_cast<int32_t>((r >> 4) & 63);
    e.launch.api = LaunchApi::kRuntime;
    (void)w.append(e);
  }
  detrace::Status st = w.close();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.isOk()) {
    fmt::print(stderr, "{}\n", st.message());
    std::exit(2);
  }
  auto size = std::filesystem::file_size(path);
  return {create_ms, seconds, static_cast<double>(size) / static_cast<double>(n), w.counters().events_dropped};
}

// A positive whole number from argv, or nullopt (a flag, a typo, zero, out of range).
std::optional<int64_t> positive(const char* text) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v <= 0) return std::nullopt;
  return v;
}

constexpr const char* kUsage =
    "usage: bench_db_writer [EVENTS [TRIALS [DIR]]]\n"
    "  times TraceWriter on EVENTS kernel-launch events (default 2000000), TRIALS times (default 5,\n"
    "  median reported), writing in DIR (default /tmp), after a warm-up of EVENTS/10\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc > 4) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  std::optional<int64_t> n = argc > 1 ? positive(argv[1]) : 2'000'000;
  std::optional<int64_t> trials = argc > 2 ? positive(argv[2]) : 5;
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (!n || !trials || *trials > 1000) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  std::string dir = argc > 3 ? argv[3] : "/tmp";
  std::string path = fmt::format("{}/bench_db_writer_{}.dtrace", dir, getpid());
  runTrial(path, std::max<int64_t>(1, *n / 10), 1);  // warm-up (page cache, allocator)
  std::vector<Trial> results;
  for (int64_t t = 0; t < *trials; ++t) results.push_back(runTrial(path, *n, static_cast<uint32_t>(t + 2)));
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  std::sort(results.begin(), results.end(),
            [](const Trial& a, const Trial& b) { return a.seconds < b.seconds; });
  const Trial& med = results[results.size() / 2];
  fmt::print("{:<28} {:>10} {:>8} {:>14} {:>12} {:>10}\n", "benchmark", "events", "trials",
             "events/s (med)", "bytes/event", "dropped");
  fmt::print("{:<28} {:>10} {:>8} {:>14.0f} {:>12.1f} {:>10}\n", "writer kernel launches", *n, *trials,
             static_cast<double>(*n) / med.seconds, med.bytes_per_event, med.dropped);
  fmt::print("(min {:.0f}/s, max {:.0f}/s; target >= 1,000,000 events/s)\n",
             static_cast<double>(*n) / results.back().seconds,
             static_cast<double>(*n) / results.front().seconds);
  std::vector<double> creates;
  for (const Trial& t : results) creates.push_back(t.create_ms);
  std::sort(creates.begin(), creates.end());
  fmt::print("writer create (new file in {}): median {:.2f} ms, min {:.2f}, max {:.2f}\n", dir,
             creates[creates.size() / 2], creates.front(), creates.back());
  return 0;
}
