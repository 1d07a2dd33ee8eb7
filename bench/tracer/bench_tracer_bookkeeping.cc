// The tracer's own CPU work per kernel launch, without CUDA: what a launch costs the launching
// thread besides CUPTI itself.
//   KernelName/*      the name lookup done at every launch and every kernel record: the former
//                     lock + std::string map, against NameCache (thread-local, pointer-keyed);
//                     with 2 threads, the second plays CUPTI's flusher thread looking up names too
//   LaunchBookkeeping a launch's slot, its driver alias and its GPU record through the
//                     ReorderBuffer into a real TraceWriter (a trace file in /tmp)
//   UnmatchedRecords  GPU records that have no slot (launches a recording window left out)
//   PlacedRecords     placement by correlation id (the default): GPU records with no slot held
//                     and written in correlation order among library ops (one GEMM, with its call
//                     window, every 6 records), range(0) records held at a time
//   LaunchWithFlusher the launching thread's part alone (slot and alias, after some busy work of
//                     its own), while a second thread plays CUPTI's flusher: it wakes periodically
//                     and hands the buffer the GPU records of the launches made so far, so the two
//                     threads meet on the buffer's lock
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "detrace/db/writer.h"
#include "detrace/tracer/name_cache.h"
#include "detrace/tracer/reorder_buffer.h"

namespace {

using namespace detrace;

// Realistic kernel names: PyTorch's elementwise kernels are long templates.
const std::vector<std::string>& names() {
  static const std::vector<std::string> n = [] {
    std::vector<std::string> v;
    for (int i = 0; i < 64; ++i) {
      v.push_back("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffNS0_"
                  "15binary_internal10MulFunctorIfEEEESt5arrayIPcLm3EEEEviT0_T1_" + std::to_string(i));
    }
    return v;
  }();
  return n;
}

void KernelNameLockedMap(benchmark::State& state) {
  static std::mutex mu;
  static std::unordered_map<std::string, int64_t> map;
  const auto& n = names();
  size_t i = 0;
  for (auto _ : state) {
    const char* name = n[i++ % n.size()].c_str();
    std::lock_guard lk(mu);
    auto it = map.find(name);
    if (it == map.end()) it = map.emplace(name, static_cast<int64_t>(map.size())).first;
    benchmark::DoNotOptimize(it->second);
  }
}
BENCHMARK(KernelNameLockedMap)->Threads(1)->Threads(2)->UseRealTime();

void KernelNameCache(benchmark::State& state) {
  static tracer::NameCache cache;
  const auto& n = names();
  size_t i = 0;
  int64_t next = 0;
  for (auto _ : state) {
    const char* name = n[i++ % n.size()].c_str();
    benchmark::DoNotOptimize(cache.lookup(name, [&](const char*) { return next++; }));
  }
}
BENCHMARK(KernelNameCache)->Threads(1)->Threads(2)->UseRealTime();

// The launch path since 2026-11-30: by the launched function's handle, reading no text. The names
// come in one reused buffer (as CUPTI may hand them over), which the text-keyed path above must
// compare in full on every hit.
void KernelNameByHandle(benchmark::State& state) {
  static tracer::NameCache cache;
  const auto& n = names();
  std::vector<int> handles(n.size());
  thread_local std::string buffer;
  size_t i = 0;
  int64_t next = 0;
  for (auto _ : state) {
    const size_t k = i++ % n.size();
    buffer.assign(n[k]);
    benchmark::DoNotOptimize(
        cache.lookupByHandle(&handles[k], buffer.c_str(), [&](const char*) { return next++; }));
  }
}
BENCHMARK(KernelNameByHandle)->Threads(1)->Threads(2)->UseRealTime();

struct WriterSink final : tracer::EventSink {
  explicit WriterSink(db::TraceWriter& writer) : w(writer) {}
  std::optional<int64_t> append(const db::Event& e) override { return w.append(e); }
  std::optional<int64_t> appendCollective(const db::Event& e, const db::Collective& c) override {
    return w.appendCollective(e, c);
  }
  std::optional<int64_t> appendGemm(const db::Event& e, const db::Gemm& g) override { return w.appendGemm(e, g); }
  std::optional<int64_t> appendMarker(const db::Event& e, const db::Marker& m) override {
    return w.appendMarker(e, m);
  }
  db::TraceWriter& w;
};

// A trace in /tmp and a ReorderBuffer writing into it: what the tracer holds while recording.
struct BenchTrace {
  explicit BenchTrace(const char* what)
      : path(std::string("/tmp/") + what + "-" + std::to_string(getpid()) + ".dtrace") {
    auto w = db::TraceWriter::create(path, {});
    if (!w.isOk()) {
      error = w.status().message();
      return;
    }
    writer = std::move(*w);
    sink = std::make_unique<WriterSink>(*writer);
    buffer = std::make_unique<tracer::ReorderBuffer>(*sink);
    name = writer->intern(names()[0]);
    stream = writer->stream(0, 0);
  }
  ~BenchTrace() {
    if (buffer) buffer->flush();
    if (writer) (void)writer->close();
    ::unlink(path.c_str());
  }
  // A launch's slot and its driver alias as the launch callbacks take them: a plain launch at its
  // API exit, lock-free (addLaunchAtExit); with `locked`, as graph and deep-window launches do, at
  // the enter with the alias added under the buffer's lock (addLaunch + addAlias).
  void launch(uint64_t corr, bool locked = false) {
    tracer::ApiLaunch l;
    l.correlation_id = corr;
    l.api = db::LaunchApi::kRuntime;
    l.cpu_ns = static_cast<int64_t>(corr);
    l.stream = stream;
    l.device = 0;
    l.name = name;
    const uint64_t alias = corr + (uint64_t{1} << 40);
    if (locked) {
      uint64_t token = buffer->addLaunch(l);
      buffer->addAlias(token, alias);
      return;
    }
    const uint32_t generation = buffer->launchEntering();
    buffer->addLaunchAtExit(l, 0, alias, false, generation);
  }
  // The GPU record of launch `corr`.
  tracer::Activity record(uint64_t corr) const {
    tracer::Activity a;
    a.correlation_id = corr;
    a.name = name;
    a.device = 0;
    a.gpu_start_ns = static_cast<int64_t>(corr);
    a.gpu_end_ns = a.gpu_start_ns + 1;
    a.has_launch = true;
    return a;
  }

  std::string path, error;
  std::unique_ptr<db::TraceWriter> writer;
  std::unique_ptr<WriterSink> sink;
  std::unique_ptr<tracer::ReorderBuffer> buffer;
  int64_t name = 0, stream = 0;
};

void LaunchBookkeeping(benchmark::State& state) {
  BenchTrace t("bench_tracer_bookkeeping");
  if (!t.error.empty()) {
    state.SkipWithError(t.error.c_str());
    return;
  }
  const bool locked = state.range(0) != 0;
  uint64_t corr = 0;
  constexpr uint64_t kInFlight = 64;  // GPU records arrive this many launches late
  for (auto _ : state) {
    ++corr;
    t.launch(corr, locked);
    if (corr > kInFlight) t.buffer->addActivity(t.record(corr - kInFlight));
  }
  state.SetItemsProcessed(state.iterations());
}
// 0: the plain-launch path (at exit, lock-free); 1: the locked path of graph and deep launches.
BENCHMARK(LaunchBookkeeping)->Arg(0)->Arg(1)->Iterations(500000)->Repetitions(5)->ReportAggregatesOnly(true);

// GPU records with no slot, as a recording window (--window, attach start --window) produces for
// every launch it leaves out: each is checked against the slots written without their records
// (a late record is dropped, not written) and then dropped.
void UnmatchedRecords(benchmark::State& state) {
  BenchTrace t("bench_tracer_unmatched");
  if (!t.error.empty()) {
    state.SkipWithError(t.error.c_str());
    return;
  }
  t.buffer->setDropUnmatched(true);
  uint64_t corr = 1;
  for (auto _ : state) t.buffer->addActivity(t.record(++corr));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(UnmatchedRecords)->Iterations(200000)->Repetitions(3)->ReportAggregatesOnly(true);

// Placement by correlation id, the reader's side (the thread decoding activity buffers): every
// record is held, then written in correlation order once the hold is over; a GEMM every 6
// records, its kernel inside its call window. `now` trails so that range(0) records stay held.
void PlacedRecords(benchmark::State& state) {
  BenchTrace t("bench_tracer_placed");
  if (!t.error.empty()) {
    state.SkipWithError(t.error.c_str());
    return;
  }
  t.buffer->setPlaceRecords(true);
  const auto held = static_cast<uint64_t>(state.range(0));
  constexpr int64_t kHold = 500'000'000;  // ReorderOptions' default
  uint64_t corr = 0;
  for (auto _ : state) {
    ++corr;
    if (corr % 6 == 0) {
      tracer::LibraryOp op;
      op.event.kind = db::EventKind::kGemm;
      op.event.cpu_ns = static_cast<int64_t>(corr);
      op.event.stream = t.stream;
      op.detail = db::Gemm{};
      op.position = corr;
      const uint64_t token = t.buffer->addLibraryOp(op);
      t.buffer->addWindowEdge(token, corr, true);
      t.buffer->addWindowEdge(token, corr + 2, false);
      ++corr;  // the GEMM's kernel
    }
    t.buffer->addActivity(t.record(corr));
    if (corr % 64 == 0 && corr > held) t.buffer->poll(static_cast<int64_t>(corr - held) + kHold);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(PlacedRecords)->Arg(1024)->Arg(16384)->Iterations(500000)->Repetitions(3)->ReportAggregatesOnly(true);

// The launching thread makes a launch every state.range(0) ns of its own work (a busy loop: the
// program's and CUDA's share of a launch), then takes its slot and alias; the flusher thread wakes
// every state.range(1) us and hands the buffer the GPU records of every launch made so far, as
// CUPTI's buffers come. range(2) = 0 leaves the recording out (the baseline: work alone); 1 takes
// the plain-launch path, 2 the locked one.
// Reported: the launching thread's time per launch, work included.
void LaunchWithFlusher(benchmark::State& state) {
  BenchTrace t("bench_tracer_flusher");
  if (!t.error.empty()) {
    state.SkipWithError(t.error.c_str());
    return;
  }
  const auto work = std::chrono::nanoseconds(state.range(0));
  const auto period = std::chrono::microseconds(state.range(1));
  const bool record = state.range(2) != 0;
  std::atomic<uint64_t> launched{0};
  std::atomic<bool> stop{false};
  std::thread flusher([&] {
    uint64_t done = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(period);
      if (!record) continue;
      const uint64_t upto = launched.load(std::memory_order_acquire);
      for (; done < upto; ++done) t.buffer->addActivity(t.record(done + 1));
    }
  });
  uint64_t corr = 0;
  for (auto _ : state) {
    const auto until = std::chrono::steady_clock::now() + work;
    while (std::chrono::steady_clock::now() < until) {
    }
    ++corr;
    if (!record) continue;
    t.launch(corr, state.range(2) == 2);
    launched.store(corr, std::memory_order_release);
  }
  stop = true;
  flusher.join();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(LaunchWithFlusher)
    ->Args({0, 1000, 1})
    ->Args({2000, 10000, 0})
    ->Args({2000, 10000, 1})
    ->Args({2000, 10000, 2})
    ->Args({6000, 10000, 0})
    ->Args({6000, 10000, 1})
    ->Args({6000, 10000, 2})
    ->Iterations(200000)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
