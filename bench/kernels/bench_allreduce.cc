// bench_allreduce: the deterministic all-reduce (kernels/allreduce.h) against NCCL's all-reduce,
// bf16 sums over every GPU of the machine, 1 MiB to 1 GiB.
//
// Method: one thread per rank (ncclCommInitAll), each on its own stream. Per size and
// implementation: 3 warm-up batches, then R timed batches of K back-to-back calls; a batch starts
// on every rank after a host barrier and is timed with CUDA events on each rank's stream; its time
// is the slowest rank's. The figure is the median batch time / K. Bus bandwidth is NCCL-tests'
// definition for all-reduce, 2 (n-1)/n x bytes / time, so the columns compare directly. Measured:
// NCCL's all-reduce, the deterministic all-reduce over NCCL both ways (AllReduceAlgo kSliced and
// kGather) and PeerAllReduce (one thread enqueues every rank's work; same timing otherwise).
//
//   bench_allreduce [--max-mib N] [--reps R] [--ngpu N]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "detrace/kernels/allreduce.h"
#include "detrace/kernels/peer_allreduce.h"

namespace dk = detrace::kernels;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    const cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "bench_allreduce: %s failed: %s\n", #call, cudaGetErrorString(e_));   \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define CHECK_NCCL(call)                                                                        \
  do {                                                                                          \
    const ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                                    \
      std::fprintf(stderr, "bench_allreduce: %s failed: %s\n", #call, ncclGetErrorString(r_));   \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

struct Rank {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
};

using Call = std::function<void(Rank&, size_t count)>;

// The median over `reps` of the slowest rank's time for `k` calls, in microseconds per call.
double timeCalls(std::vector<Rank>& ranks, const Call& call, size_t count, int k, int reps) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::vector<float>> ms(static_cast<size_t>(n));
  std::barrier sync(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Rank& rk = ranks[static_cast<size_t>(r)];
      CHECK_CUDA(cudaSetDevice(r));
      for (int rep = -3; rep < reps; ++rep) {  // 3 warm-up batches
        sync.arrive_and_wait();
        CHECK_CUDA(cudaEventRecord(rk.start, rk.stream));
        for (int i = 0; i < k; ++i) call(rk, count);
        CHECK_CUDA(cudaEventRecord(rk.stop, rk.stream));
        CHECK_CUDA(cudaEventSynchronize(rk.stop));
        float t = 0;
        CHECK_CUDA(cudaEventElapsedTime(&t, rk.start, rk.stop));
        if (rep >= 0) ms[static_cast<size_t>(r)].push_back(t);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> slowest(static_cast<size_t>(reps), 0.0);
  for (const auto& v : ms) {
    for (int i = 0; i < reps; ++i) slowest[static_cast<size_t>(i)] = std::max<double>(slowest[static_cast<size_t>(i)], v[static_cast<size_t>(i)]);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2] * 1e3 / k;
}

// PeerAllReduce (one thread enqueues on every rank's stream): the median over `reps` of the
// slowest rank's time for `k` calls, in microseconds per call.
double timePeer(std::vector<Rank>& ranks, dk::PeerAllReduce& peer, size_t count, int k, int reps) {
  const size_t n = ranks.size();
  std::vector<const void*> sends;
  std::vector<void*> recvs;
  std::vector<cudaStream_t> streams;
  for (Rank& rk : ranks) {
    sends.push_back(rk.send);
    recvs.push_back(rk.recv);
    streams.push_back(rk.stream);
  }
  std::vector<double> slowest;
  for (int rep = -3; rep < reps; ++rep) {
    for (size_t r = 0; r < n; ++r) {
      CHECK_CUDA(cudaSetDevice(static_cast<int>(r)));
      CHECK_CUDA(cudaEventRecord(ranks[r].start, ranks[r].stream));
    }
    for (int i = 0; i < k; ++i) {
      const detrace::Status s = peer.run(sends.data(), recvs.data(), count, dk::DType::kBF16,
                                         dk::ReduceOrder::kRankOrder, 0, streams.data());
      if (!s.isOk()) {
        std::fprintf(stderr, "bench_allreduce: %s\n", s.message().c_str());
        std::exit(1);
      }
    }
    double worst = 0;
    for (size_t r = 0; r < n; ++r) {
      CHECK_CUDA(cudaSetDevice(static_cast<int>(r)));
      CHECK_CUDA(cudaEventRecord(ranks[r].stop, ranks[r].stream));
      CHECK_CUDA(cudaEventSynchronize(ranks[r].stop));
      float t = 0;
      CHECK_CUDA(cudaEventElapsedTime(&t, ranks[r].start, ranks[r].stop));
      worst = std::max<double>(worst, t);
    }
    if (rep >= 0) slowest.push_back(worst);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2] * 1e3 / k;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_mib = 1024;
  int reps = 15, ngpu = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max-mib" && i + 1 < argc) {
      max_mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--ngpu" && i + 1 < argc) {
      ngpu = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_allreduce [--max-mib N] [--reps R] [--ngpu N]\n");
      return 2;
    }
  }
  int have = 0;
  CHECK_CUDA(cudaGetDeviceCount(&have));
  const int n = ngpu > 0 ? std::min(ngpu, have) : have;
  if (n < 1 || reps < 1) {
    std::fprintf(stderr, "bench_allreduce: no GPU\n");
    return 1;
  }
  const size_t max_bytes = max_mib * kMiB;
  const size_t max_count = max_bytes / 2;
  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  CHECK_NCCL(ncclCommInitAll(comms.data(), n, nullptr));
  for (int r = 0; r < n; ++r) {
    Rank& rk = ranks[static_cast<size_t>(r)];
    rk.comm = comms[static_cast<size_t>(r)];
    CHECK_CUDA(cudaSetDevice(r));
    CHECK_CUDA(cudaStreamCreateWithFlags(&rk.stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreate(&rk.start));
    CHECK_CUDA(cudaEventCreate(&rk.stop));
    rk.ws_bytes = std::max(
        dk::deterministicAllReduceWorkspaceBytes(max_count, dk::DType::kBF16, n, dk::AllReduceAlgo::kSliced),
        dk::deterministicAllReduceWorkspaceBytes(max_count, dk::DType::kBF16, n, dk::AllReduceAlgo::kGather));
    CHECK_CUDA(cudaMalloc(&rk.send, max_bytes));
    CHECK_CUDA(cudaMalloc(&rk.recv, max_bytes));
    CHECK_CUDA(cudaMalloc(&rk.ws, rk.ws_bytes));
    CHECK_CUDA(cudaMemset(rk.send, 0x3c, max_bytes));  // bf16 0x3c3c: finite values
  }
  const Call nccl = [](Rank& rk, size_t count) {
    CHECK_NCCL(ncclAllReduce(rk.send, rk.recv, count, ncclBfloat16, ncclSum, rk.comm, rk.stream));
  };
  auto det = [](dk::AllReduceAlgo algo) -> Call {
    return [algo](Rank& rk, size_t count) {
      const detrace::Status s = dk::deterministicAllReduce(
          rk.send, rk.recv, count, dk::DType::kBF16, dk::ReduceOrder::kRankOrder, 0, rk.comm,
          rk.stream, rk.ws, rk.ws_bytes, algo);
      if (!s.isOk()) {
        std::fprintf(stderr, "bench_allreduce: %s\n", s.message().c_str());
        std::exit(1);
      }
    };
  };
  const Call sliced = det(dk::AllReduceAlgo::kSliced), gather = det(dk::AllReduceAlgo::kGather);
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  auto peer = dk::PeerAllReduce::create(devices);
  setenv("DETRACE_PEER_MODE", "copies", 1);  // the same, gathered by the copy engines
  auto copies = dk::PeerAllReduce::create(devices);
  unsetenv("DETRACE_PEER_MODE");
  if (!peer.isOk() || !copies.isOk()) {
    std::fprintf(stderr, "bench_allreduce: %s\n",
                 (peer.isOk() ? copies.status() : peer.status()).message().c_str());
    return 1;
  }
  int nccl_version = 0;
  CHECK_NCCL(ncclGetVersion(&nccl_version));
  std::printf("bench_allreduce: %d GPU(s), NCCL %d, bf16 sum, median of %d batches; bus bandwidth "
              "= 2(n-1)/n x bytes / time\n", n, nccl_version, reps);
  std::printf("%10s  %9s %9s  %9s %9s %7s  %9s %9s %7s  %7s  %9s %9s %7s  %9s %7s\n", "size",
              "nccl us", "GB/s", "sliced us", "GB/s", "vs nccl", "gather us", "GB/s", "vs nccl",
              "auto", "peer us", "GB/s", "vs nccl", "copies us", "vs nccl");
  const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  for (size_t bytes = kMiB; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / 2;
    const int k = static_cast<int>(std::clamp<size_t>(256 * kMiB / bytes, 1, 20));
    auto bw = [&](double us) { return bus * static_cast<double>(bytes) / (us * 1e3); };
    const double t_nccl = timeCalls(ranks, nccl, count, k, reps);
    const double t_sliced = timeCalls(ranks, sliced, count, k, reps);
    const double t_gather = timeCalls(ranks, gather, count, k, reps);
    // AllReduceAlgo::kAuto's choice: gather while the peers' bytes are at most 4 MiB.
    const double t_auto = bytes * static_cast<size_t>(n - 1) <= 4 * kMiB ? t_gather : t_sliced;
    const double t_peer = timePeer(ranks, **peer, count, k, reps);
    const double t_copies = timePeer(ranks, **copies, count, k, reps);
    std::printf("%7zu MiB  %9.1f %9.1f  %9.1f %9.1f %6.1f%%  %9.1f %9.1f %6.1f%%  %6.1f%%  %9.1f %9.1f "
                "%6.1f%%  %9.1f %6.1f%%\n",
                bytes / kMiB, t_nccl, bw(t_nccl), t_sliced, bw(t_sliced), 100 * t_nccl / t_sliced,
                t_gather, bw(t_gather), 100 * t_nccl / t_gather, 100 * t_nccl / t_auto, t_peer,
                bw(t_peer), 100 * t_nccl / t_peer, t_copies, 100 * t_nccl / t_copies);
    std::fflush(stdout);
  }
  std::printf("vs nccl: the deterministic all-reduce's bus bandwidth as a share of NCCL's; auto: "
              "AllReduceAlgo::kAuto's choice (gather up to 4 MiB from the peers, sliced above); "
              "peer: PeerAllReduce (one process, no NCCL; %s: one fused kernel per GPU, peer loads and "
              "stores, loads in flight per thread: DETRACE_PEER_LOADS, default 8); copies: "
              "PeerAllReduce's copy-engine path (DETRACE_PEER_MODE=copies)\n",
              (*peer)->fused() ? "fused" : "NOT fused");
  for (int r = 0; r < n; ++r) {
    Rank& rk = ranks[static_cast<size_t>(r)];
    CHECK_CUDA(cudaSetDevice(r));
    (void)cudaFree(rk.send);
    (void)cudaFree(rk.recv);
    (void)cudaFree(rk.ws);
    (void)ncclCommDestroy(rk.comm);
  }
  return 0;
}
