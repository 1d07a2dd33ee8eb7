// bench_gemm: time of each GEMM form at M in {1, 64, 256, 3072, 4096} with N = K = 4096, and at
// 8192^3, bf16 in and out. CUDA events around back-to-back calls (enough of them for >= ~0.5 ms),
// 3 warm-up calls, median of 15 samples; random inputs. Prints one table:
//   kernel | M | N | K | time_us | TFLOP/s | % of cuBLAS default
// where the last column compares with the cuBLASLt heuristic at the same shape.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "detrace/kernels/gemm.h"
#include "detrace/kernels/gemm_cublaslt.h"

namespace {

using detrace::Status;
using namespace detrace::kernels;

#define BENCH_CUDA(call)                                                              \
  do {                                                                                \
    const cudaError_t bench_err_ = (call);                                            \
    if (bench_err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(bench_err_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

void* deviceRandom(size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> host(count);
  for (auto& w : host) w = floatToBf16(u(rng));
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, count * 2));
  BENCH_CUDA(cudaMemcpy(p, host.data(), count * 2, cudaMemcpyHostToDevice));
  return p;
}

bool ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "  %s failed: %s\n", what, cudaGetErrorString(err));
  return false;
}

// Median microseconds per call of `fn`, or -1 (after a message on stderr) if anything fails.
double timeCall(const std::function<Status()>& fn, cudaEvent_t start, cudaEvent_t stop) {
  for (int i = 0; i < 3; ++i) {
    if (const Status s = fn(); !s.isOk()) {
      std::fprintf(stderr, "  failed: %s\n", s.message().c_str());
      return -1.0;
    }
  }
  if (!ok(cudaDeviceSynchronize(), "warm-up")) return -1.0;
  float one_ms = 0.0f;
  if (!ok(cudaEventRecord(start), "cudaEventRecord") || !fn().isOk() ||
      !ok(cudaEventRecord(stop), "cudaEventRecord") ||
      !ok(cudaEventSynchronize(stop), "cudaEventSynchronize") ||
      !ok(cudaEventElapsedTime(&one_ms, start, stop), "cudaEventElapsedTime")) {
    return -1.0;
  }
  const int reps = std::clamp(static_cast<int>(0.5f / std::max(one_ms, 1e-4f)), 1, 200);
  std::vector<double> samples;
  for (int s = 0; s < 15; ++s) {
    float ms = 0.0f;
    if (!ok(cudaEventRecord(start), "cudaEventRecord")) return -1.0;
    for (int r = 0; r < reps; ++r) (void)fn();
    if (!ok(cudaEventRecord(stop), "cudaEventRecord") ||
        !ok(cudaEventSynchronize(stop), "cudaEventSynchronize (a kernel failed)") ||
        !ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime")) {
      return -1.0;
    }
    samples.push_back(1000.0 * static_cast<double>(ms) / reps);
  }
  std::nth_element(samples.begin(), samples.begin() + 7, samples.end());
  return samples[7];
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  auto lt = CublasLtGemm::create();
  if (!lt.isOk()) {
    std::fprintf(stderr, "cuBLASLt: %s\n", lt.status().message().c_str());
    return 1;
  }
  std::mt19937_64 rng(std::random_device{}());
  const int64_t max_dim = 8192;
  void* a = deviceRandom(static_cast<size_t>(max_dim * max_dim), rng);
  void* b = deviceRandom(static_cast<size_t>(max_dim * max_dim), rng);
  void* d = nullptr;
  BENCH_CUDA(cudaMalloc(&d, static_cast<size_t>(max_dim * max_dim) * 2));
  void* ws = nullptr;
  BENCH_CUDA(cudaMalloc(&ws, size_t{kPlantedSplitK} * kPlantedSplitKMaxM * max_dim * 4));
  const size_t ws_bytes = size_t{kPlantedSplitK} * kPlantedSplitKMaxM * max_dim * 4;
  cudaEvent_t start = nullptr, stop = nullptr;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));

  struct Row {
    const char* name;
    std::function<Status(const GemmArgs&)> fn;
  };
  const std::vector<Row> rows = {
      {"cublasLt default", [&](const GemmArgs& g) { return lt->gemmHeuristic(g, nullptr); }},
      {"cublasLt pinned", [&](const GemmArgs& g) { return lt->gemmPinned(g, nullptr); }},
      {"ours wgmma", [&](const GemmArgs& g) { return gemmBatchInvariant(g, nullptr, GemmKernel::kWgmma); }},
      {"ours mma.sync", [&](const GemmArgs& g) { return gemmBatchInvariant(g, nullptr, GemmKernel::kMmaSync); }},
      {"planted splitK", [&](const GemmArgs& g) { return planted_splitKGemm(g, ws, ws_bytes, nullptr); }},
  };
  struct Shape { int64_t m, n, k; };
  const Shape shapes[] = {{1, 4096, 4096},    {64, 4096, 4096},   {256, 4096, 4096},
                          {3072, 4096, 4096}, {4096, 4096, 4096}, {8192, 8192, 8192}};

  for (const Shape& s : shapes) {
    auto pinned = lt->pinnedAlgo(s.n, s.k, DType::kBF16, DType::kBF16);
    const GemmArgs g{s.m, s.n, s.k, DType::kBF16, DType::kBF16, a, b, d};
    auto heur = lt->heuristicAlgo(g);
    std::printf("# M=%lld N=%lld K=%lld default: %s | pinned: %s\n", static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k),
                heur.isOk() ? heur->toString().c_str() : heur.status().message().c_str(),
                pinned.isOk() ? pinned->toString().c_str() : pinned.status().message().c_str());
  }
  // Shape by shape, every row back to back, so that clock and temperature drift over the run
  // does not favour the rows measured first. A sticky CUDA error stops the measuring; the table
  // then shows what was measured.
  constexpr size_t kShapes = std::size(shapes);
  std::vector<std::vector<double>> us(rows.size(), std::vector<double>(kShapes, -1.0));
  bool device_ok = true;
  for (size_t i = 0; i < kShapes && device_ok; ++i) {
    const Shape& s = shapes[i];
    const GemmArgs g{s.m, s.n, s.k, DType::kBF16, DType::kBF16, a, b, d};
    for (size_t r = 0; r < rows.size() && device_ok; ++r) {
      us[r][i] = timeCall([&] { return rows[r].fn(g); }, start, stop);
      if (us[r][i] < 0.0) {
        std::fprintf(stderr, "  (%s at M=%lld)\n", rows[r].name, static_cast<long long>(s.m));
        device_ok = cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
      }
    }
  }
  std::printf("%-22s | %5s | %5s | %5s | %10s | %8s | %s\n", "kernel", "M", "N", "K", "time_us",
              "TFLOP/s", "% of cuBLAS default");
  for (size_t i = 0; i < kShapes; ++i) {
    const Shape& s = shapes[i];
    const double base_us = us[0][i];  // rows[0] is the cuBLASLt default
    for (size_t r = 0; r < rows.size(); ++r) {
      const double t = us[r][i];
      const double tflops = t > 0.0 ? 2.0 * s.m * s.n * s.k / (t * 1e-6) / 1e12 : 0.0;
      const std::string pct = t <= 0.0 ? "failed"
                              : base_us > 0.0 ? fmt::format("{:.1f}", 100.0 * base_us / t)
                                              : "-";
      std::printf("%-22s | %5lld | %5lld | %5lld | %10.2f | %8.1f | %s\n", rows[r].name,
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), t, tflops, pct.c_str());
    }
  }
  if (!device_ok) {
    std::printf("# a kernel left a sticky CUDA error: rows after it were not measured\n");
    return 1;
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(ws);
  return 0;
}
