// lane_cost: what a digest costs the program's thread when another thread launches it.
//
// Today a GEMM's thread launches the digest kernel itself after the GEMM (about 7 us of the
// decode loop's time per GEMM on the H200, CUPTI's record of it included). The alternative
// measured here ("lane") leaves the program's thread one driver call, a cuStreamBatchMemOp on the
// program's stream that writes a "GEMM done" word and waits for a "digest done" word, and hands
// the launch to a helper thread: on a stream of its own it waits for the first word
// (cuStreamWaitValue64) and launches the kernel, which writes the second. The program's stream is
// then held until the digest has read its operands, as it is today.
//
// Blocks of --calls calls on the program's (legacy default) stream, timed on the calling thread
// only, alternate with paired blocks of the other side (which goes first alternating), and only
// the per-block paired differences are kept (the host's speed drifts too much for whole loops):
//   memop      a direct launch of the digest stand-in (8 bytes of parameters, one thread storing
//              a word) against the memop alone (its wait already satisfied; the helper idle)
//   lane       a direct launch against the whole lane (memop; the helper launching each digest)
//   contention a direct launch with the helper thread launching empty kernels on its own stream
//              against one with it idle: whether two launching threads slow each other
//   graph      a direct launch against cuGraphLaunch of a graph holding the same kernel alone
//              (instantiated beforehand; kGraphs graphs used in turn, each storing its own word):
//              whether a prepared graph launches for less than a kernel (the digest's parameters
//              would then sit in a per-graph slot the host fills before the launch)
// --gap-us N spins N microseconds between calls (the program's own work between GEMMs). No CUPTI
// here: a direct launch also pays CUPTI's record (0.35-0.62 us measured by cupti_record_cost); the
// memop has no kernel record. Checks that every digest stand-in stored its word (exit status 1 if
// not) and gives up (exit status 2) if a block does not finish within 20 s.
// Usage: lane_cost [--blocks N] [--calls N] [--gap-us N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "paired_blocks.h"

namespace {

using detrace::bench::alternate;
using detrace::bench::report;

// The digest stand-in: its results visible system-wide, then the done word.
__global__ void storeDone(unsigned long long* word, unsigned long long value) {
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(word) = value;
}
__global__ void emptyKernel() {}

[[noreturn]] void die(const char* call, CUresult r) {
  const char* s = nullptr;
  cuGetErrorString(r, &s);
  std::fprintf(stderr, "lane_cost: %s failed: %s\n", call, s != nullptr ? s : "?");
  std::exit(1);
}
#define CHECK_CU(call)                      \
  do {                                      \
    const CUresult r_ = (call);             \
    if (r_ != CUDA_SUCCESS) die(#call, r_); \
  } while (0)

using Clock = std::chrono::steady_clock;

void spinFor(double us) {
  if (us <= 0) return;
  const auto until = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1000));
  while (Clock::now() < until) {
  }
}

constexpr int kSlots = 4096;  // lane slots: a word pair each; a request ring of as many
constexpr int kGraphs = 64;   // graphs of the graph pass, each storing to its own word

// Words in mapped host memory: the host can always release a wait on them.
struct Words {
  unsigned long long* host = nullptr;
  CUdeviceptr dev = 0;
  explicit Words(size_t n) {
    void* p = nullptr;
    CHECK_CU(cuMemHostAlloc(&p, n * 8, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    std::memset(p, 0, n * 8);
    host = static_cast<unsigned long long*>(p);
    CHECK_CU(cuMemHostGetDevicePointer(&dev, p, 0));
  }
};

// The helper thread: takes (slot, value) requests from a single-producer ring, waits on its own
// stream for the slot's GEMM word and launches the stand-in that stores the slot's done word. In
// "busy" mode it launches empty kernels back to back instead.
class Helper {
 public:
  enum Mode { kIdle, kLane, kBusy };
  Helper(CUcontext ctx, const Words& gemm, const Words& done, CUfunction store, CUfunction empty)
      : ctx_(ctx), gemm_(gemm), done_(done), store_(store), empty_(empty) {
    thread_ = std::thread([this] { run(); });
  }
  ~Helper() {
    stop_ = true;
    thread_.join();
  }
  void setMode(Mode m) { mode_.store(m, std::memory_order_release); }
  void push(uint32_t slot, uint64_t value) {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    while (h - tail_.load(std::memory_order_acquire) >= kSlots) {
    }
    ring_[h % kSlots] = {slot, value};
    head_.store(h + 1, std::memory_order_release);
  }
  bool drained() const {
    return tail_.load(std::memory_order_acquire) == head_.load(std::memory_order_acquire);
  }

 private:
  struct Request {
    uint32_t slot;
    uint64_t value;
  };
  void run() {
    CHECK_CU(cuCtxSetCurrent(ctx_));
    CUstream s = nullptr;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    while (!stop_) {
      const Mode m = mode_.load(std::memory_order_acquire);
      if (m == kBusy) {
        CHECK_CU(cuLaunchKernel(empty_, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr));
        continue;
      }
      const uint64_t t = tail_.load(std::memory_order_relaxed);
      if (t == head_.load(std::memory_order_acquire)) continue;  // spin
      const Request r = ring_[t % kSlots];
      CHECK_CU(
          cuStreamWaitValue64(s, gemm_.dev + r.slot * 8ull, r.value, CU_STREAM_WAIT_VALUE_GEQ));
      CUdeviceptr word = done_.dev + r.slot * 8ull;
      unsigned long long value = r.value;
      void* args[] = {&word, &value};
      CHECK_CU(cuLaunchKernel(store_, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
      tail_.store(t + 1, std::memory_order_release);
    }
    cuStreamSynchronize(s);
    cuStreamDestroy(s);
  }
  CUcontext ctx_;
  const Words& gemm_;
  const Words& done_;
  CUfunction store_, empty_;
  std::atomic<Mode> mode_{kIdle};
  std::atomic<bool> stop_{false};
  Request ring_[kSlots] = {};
  std::atomic<uint64_t> head_{0}, tail_{0};
  std::thread thread_;
};

struct Options {
  int blocks = 1000;
  int calls = 256;
  double gap_us = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    if (!std::strcmp(argv[i], "--blocks") && more) {
      o.blocks = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--calls") && more) {
      o.calls = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--gap-us") && more) {
      o.gap_us = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: lane_cost [--blocks N] [--calls N] [--gap-us N]\n");
      std::exit(2);
    }
  }
  if (o.blocks < 1 || o.calls < 1 || o.calls > kSlots || o.gap_us < 0) {
    std::fprintf(stderr, "lane_cost: --blocks >= 1, 1 <= --calls <= %d, --gap-us >= 0\n", kSlots);
    std::exit(2);
  }
  return o;
}

// Waits for the program's stream (and the helper's queue), giving up after 20 s: a lane that
// never releases the program's stream is the failure this design must not have.
void finish(Helper* helper) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (helper != nullptr && !helper->drained()) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "lane_cost: the helper's queue did not drain within 20 s\n");
      std::exit(2);
    }
  }
  for (;;) {
    const CUresult r = cuStreamQuery(nullptr);
    if (r == CUDA_SUCCESS) return;
    if (r != CUDA_ERROR_NOT_READY) die("cuStreamQuery", r);
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "lane_cost: the program's stream did not finish within 20 s (a hang)\n");
      std::exit(2);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  CHECK_CU(cuInit(0));
  CUdevice dev = 0;
  CHECK_CU(cuDeviceGet(&dev, 0));
  int memops64 = 0;
  CHECK_CU(cuDeviceGetAttribute(&memops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  CUcontext ctx = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  std::printf("lane_cost: %d block pairs of %d calls, %.1f us between calls; 64-bit memops %s\n",
              o.blocks, o.calls, o.gap_us, memops64 ? "supported" : "NOT supported");
  if (!memops64) return 1;
  cudaFunction_t store = nullptr, empty = nullptr;
  if (cudaGetFuncBySymbol(&store, reinterpret_cast<const void*>(storeDone)) != cudaSuccess ||
      cudaGetFuncBySymbol(&empty, reinterpret_cast<const void*>(emptyKernel)) != cudaSuccess) {
    std::fprintf(stderr, "lane_cost: cudaGetFuncBySymbol failed\n");
    return 1;
  }
  CHECK_CU(cuCtxSetCurrent(ctx));
  Words gemm(kSlots), done(kSlots), scratch(1);
  Helper helper(ctx, gemm, done, reinterpret_cast<CUfunction>(store),
                reinterpret_cast<CUfunction>(empty));
  uint64_t value = 0;       // increases with every lane call: each slot's words only grow
  CUstream prog = nullptr;  // the legacy default stream, as eager PyTorch launches on

  auto direct = [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.calls; ++i) {
      CUdeviceptr word = scratch.dev;
      unsigned long long v = static_cast<unsigned long long>(i);
      void* args[] = {&word, &v};
      CHECK_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(store), 1, 1, 1, 1, 1, 1, 0, prog, args,
                              nullptr));
      spinFor(o.gap_us);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    finish(nullptr);
    return ns / o.calls - o.gap_us * 1000;
  };
  auto memop = [&](bool lane) {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.calls; ++i) {
      const uint64_t v = ++value;
      const uint32_t slot = static_cast<uint32_t>(v % kSlots);
      CUstreamBatchMemOpParams p[2];
      std::memset(p, 0, sizeof p);
      p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
      p[0].writeValue.address = gemm.dev + slot * 8ull;
      p[0].writeValue.value64 = v;
      p[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
      p[1].waitValue.address = done.dev + slot * 8ull;
      p[1].waitValue.value64 = lane ? v : 0;  // without the helper: already satisfied
      p[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
      if (lane) helper.push(slot, v);
      CHECK_CU(cuStreamBatchMemOp(prog, 2, p, 0));
      spinFor(o.gap_us);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    finish(lane ? &helper : nullptr);
    return ns / o.calls - o.gap_us * 1000;
  };

  // The graph pass's graphs: one storeDone node each, parameters fixed when instantiated.
  Words graph_words(kGraphs);
  std::vector<CUgraphExec> execs(kGraphs);
  std::vector<unsigned long long> graph_values(kGraphs);
  std::vector<CUdeviceptr> graph_targets(kGraphs);
  for (int g = 0; g < kGraphs; ++g) {
    graph_targets[g] = graph_words.dev + g * 8ull;
    graph_values[g] = static_cast<unsigned long long>(g + 1);
    void* args[] = {&graph_targets[g], &graph_values[g]};
    CUgraph graph = nullptr;
    CHECK_CU(cuGraphCreate(&graph, 0));
    CUDA_KERNEL_NODE_PARAMS kp;
    std::memset(&kp, 0, sizeof kp);
    kp.func = reinterpret_cast<CUfunction>(store);
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    CUgraphNode node = nullptr;
    CHECK_CU(cuGraphAddKernelNode(&node, graph, nullptr, 0, &kp));
    CHECK_CU(cuGraphInstantiate(&execs[g], graph, 0));
    CHECK_CU(cuGraphDestroy(graph));
  }
  auto graphs = [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.calls; ++i) {
      CHECK_CU(cuGraphLaunch(execs[i % kGraphs], prog));
      spinFor(o.gap_us);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    finish(nullptr);
    return ns / o.calls - o.gap_us * 1000;
  };

  std::vector<double> on, off;
  alternate(
      o.blocks, [&](bool with) { return with ? direct() : graphs(); }, on, off);
  report("graph", "direct launch", "graph launch", on, off);
  int graph_wrong = 0;
  for (int g = 0; g < std::min(kGraphs, o.calls); ++g) {
    if (graph_words.host[g] != static_cast<unsigned long long>(g + 1)) ++graph_wrong;
  }
  std::printf("graph: the %d graphs' words %s\n", std::min(kGraphs, o.calls),
              graph_wrong == 0 ? "all stored" : "SOME NOT STORED");
  for (CUgraphExec e : execs) cuGraphExecDestroy(e);

  on.clear();
  off.clear();
  alternate(
      o.blocks, [&](bool with) { return with ? direct() : memop(false); }, on, off);
  report("memop", "direct launch", "memop (helper idle)", on, off);

  on.clear();
  off.clear();
  helper.setMode(Helper::kLane);
  alternate(
      o.blocks, [&](bool with) { return with ? direct() : memop(true); }, on, off);
  report("lane", "direct launch", "lane (helper launching)", on, off);
  // Every done word holds the last value its slot was given: each stand-in ran.
  finish(&helper);
  int wrong = 0;
  for (uint64_t v = value > kSlots ? value - kSlots + 1 : 1; v <= value; ++v) {
    if (done.host[v % kSlots] != v) ++wrong;
  }
  std::printf("lane: %llu lane calls; done words of the last %d: %s\n",
              static_cast<unsigned long long>(value),
              std::min<int>(kSlots, static_cast<int>(value)),
              wrong == 0 ? "all as expected" : "SOME WRONG");

  on.clear();
  off.clear();
  alternate(
      o.blocks,
      [&](bool with) {
        helper.setMode(with ? Helper::kBusy : Helper::kIdle);
        return direct();
      },
      on, off);
  helper.setMode(Helper::kIdle);
  report("contention", "direct launch, helper launching", "helper idle", on, off);
  return wrong == 0 && graph_wrong == 0 ? 0 : 1;
}
