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
#include "detrace/replay/diff.h"

using namespace detrace;

namespace {

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = (a ^ 0x9E3779B97F4A7C15ULL) * (b | 1);
  return x ^ (x >> 31);
}

// Writes one run of about `events` events; `plant` = the GEMM index whose output is perturbed.
void writeRun(const std::string& dir, int64_t events, int64_t plant) {
  std::filesystem::create_directories(dir);
  db::WriterOptions o;
  o.overwrite = true;
  o.policy = db::OverflowPolicy::kBlock;
  auto w = db::TraceWriter::create(dir + "/proc-1.dtrace", o);
  if (!w.isOk()) {
    fmt::print(stderr, "{}\n", w.status().message());
    std::exit(2);
  }
  (*w)->setRank({0, 1, 0, 0, 1, "bench", "GPU", ""});
  std::vector<int64_t> names;
  for (int i = 0; i < 40; ++i) names.push_back((*w)->intern(fmt::format("void elementwise_kernel_{}<bf16, 4>(float*, int)", i)));
  int64_t gemm_kernel = (*w)->intern("nvjet_sm90_tst_128x64_64x8_2x1_v_bz_TNT");
  int64_t api = (*w)->intern("cublasLtMatmul");
  int64_t stream = (*w)->stream(7, 0);
  uint64_t h = 42;
  int64_t n = 0, gemm_index = 0;
  auto kernel = [&](int64_t name, int64_t parent) {
    db::Event e;
    e.kind = db::EventKind::kKernel;
    e.name = name;
    e.stream = stream;
    e.cpu_ns = 1000 * n;
    e.gpu_start_ns = e.cpu_ns + 10;
    e.gpu_end_ns = e.gpu_start_ns + 5;
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {128, 1, 1};
    e.launch.block = {256, 1, 1};
    (void)(*w)->append(e);
    ++n;
  };
  while (n < events) {
    for (int i = 0; i < 6; ++i) kernel(names[static_cast<size_t>((n + i) % 40)], -1);
    db::Event ge;
    ge.kind = db::EventKind::kGemm;
    ge.name = api;
    ge.stream = stream;
    db::Gemm g;
    g.m = 4096; g.n = 8; g.k = 4096;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = 66; g.tile = 24; g.split_k = 1;
    auto seq = (*w)->appendGemm(ge, g);
    ++n;
    for (int slot = 0; slot < 3; ++slot) {
      db::Operand op;
      op.seq = *seq;
      op.slot = slot;
      op.role = slot == 2 ? db::OperandRole::kOutput : db::OperandRole::kInput;
      op.has_digest = true;
      uint64_t out = mix(h, static_cast<uint64_t>(gemm_index));
      if (slot == 2 && gemm_index == plant) out ^= 1;
      op.digest = slot == 2 ? out : mix(h, static_cast<uint64_t>(slot));
      op.rows = 8;
      op.row_bytes = 8192;
      for (int r = 0; r < 8; ++r) op.row_digests.push_back(mix(op.digest, static_cast<uint64_t>(r)));
      (void)(*w)->appendOperand(std::move(op));
      if (slot == 2) h = out;
    }
    ++gemm_index;
    kernel(gemm_kernel, *seq);
  }
  if (!(*w)->close().isOk()) std::exit(2);
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
