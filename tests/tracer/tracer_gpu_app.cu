// A small CUDA program for the tracer's GPU test: kernels alternating on two streams, two
// cuBLASLt matmuls (one with the algorithm left to cuBLASLt, one with an explicit algorithm), and a
// two-kernel CUDA graph replayed three times. The phases are NVTX ranges "step 0", "step 1" (with a
// nested "layer 0") and "step 2". A and B hold exact patterns (fillA/fillB below, mirrored by the
// test) so that D = A * B is exact in fp32 whatever the summation order. It prints nothing the
// test depends on. `tracer_gpu_app graph DIR` runs another program instead: GEMMs and an
// all-reduce captured into CUDA graphs and replayed (graph_gpu_app.cuh, for gpu_graph_test.cc);
// `tracer_gpu_app graph-threads DIR [serialized|switching|serialized-reset]` launches one such
// graph from two threads.
// `tracer_gpu_app threads` runs two threads at once, each on its own stream, alternating a plain
// kernel of its own (thread0_kernel, thread1_kernel) and a cuBLASLt matmul (threadsMain below);
// `tracer_gpu_app reset` does the same on one thread around a cudaDeviceReset (resetMain);
// `tracer_gpu_app fresh-thread` makes matmuls from a thread with no CUDA work before them;
// `tracer_gpu_app held-cupti LIBCUPTI` holds CUPTI itself, as another profiler would;
// `tracer_gpu_app nccl-comms` makes NCCL communicators the newer ways (ncclCommsMain);
// `tracer_gpu_app graph-disabled DIR [before-start]` launches a graph with one of its kernel nodes
// disabled for a while (graphDisabledMain);
// `tracer_gpu_app lt-heuristic` calls cuBLASLt matmuls with and without an algorithm in pairs
// (lt_heuristic_gpu_app.cuh); `tracer_gpu_app lt-epilogue` calls them with epilogues
// (lt_epilogue_gpu_app.cuh).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>  // for ncclConfig_t and its initializer only: NCCL's functions are looked up
#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "graph_gpu_app.cuh"
#include "lt_epilogue_gpu_app.cuh"
#include "lt_heuristic_gpu_app.cuh"

#define CK(call)                                                                    \
  do {                                                                              \
    auto e_ = (call);                                                               \
    if (static_cast<int>(e_) != 0) {                                                \
      std::fprintf(stderr, "tracer_gpu_app: %s failed (%d)\n", #call, static_cast<int>(e_)); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

__global__ void scale_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
__global__ void add_one_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
__global__ void graph_first_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] -= 1.0f;
}
__global__ void graph_second_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 0.5f;
}

__global__ void fill_kernel(float* x, int n, int mod, float scale, float offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>(i % mod) * scale + offset;
}

__global__ void thread0_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 2.0f;
}
__global__ void thread1_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 3.0f;
}

// A 128x128x128 fp32 cuBLASLt matmul D = A B on a stream of its own, A and B filled with exact
// patterns: what threadBody and freshThreadMain repeat.
struct Matmul128 {
  static constexpr int m = 128, n = m * m;
  cudaStream_t s = nullptr;
  float *A = nullptr, *B = nullptr, *D = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t l = nullptr;

  int create() {
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&A, n * sizeof(float)));
    CK(cudaMalloc(&B, n * sizeof(float)));
    CK(cudaMalloc(&D, n * sizeof(float)));
    fill_kernel<<<n / 256, 256, 0, s>>>(A, n, 13, 0.5f, 0.0f);
    fill_kernel<<<n / 256, 256, 0, s>>>(B, n, 7, 0.25f, 0.0f);
    CK(cublasLtCreate(&lt));
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, m, m, m));
    CK(cudaStreamSynchronize(s));
    return 0;
  }
  int run() {
    float alpha = 1.0f, beta = 0.0f;
    CK(cublasLtMatmul(lt, desc, &alpha, A, l, B, l, &beta, D, l, D, l, nullptr, nullptr, 0, s));
    return 0;
  }
  int destroy() {
    CK(cudaStreamSynchronize(s));
    CK(cublasLtMatrixLayoutDestroy(l));
    CK(cublasLtMatmulDescDestroy(desc));
    CK(cublasLtDestroy(lt));
    return 0;
  }
};

// One of threadsMain's threads: `rounds` times a plain kernel, then a Matmul128, on a stream of
// its own. Both threads start together so that their calls interleave.
int threadBody(int which, int rounds, std::atomic<int>& ready) {
  Matmul128 mm;
  if (mm.create() != 0) return 1;
  const int n = Matmul128::n;
  float* x;
  CK(cudaMalloc(&x, n * sizeof(float)));
  ready.fetch_add(1);
  while (ready.load() < 2) {
  }
  for (int r = 0; r < rounds; ++r) {
    if (which == 0) {
      thread0_kernel<<<n / 256, 256, 0, mm.s>>>(x, n);
    } else {
      thread1_kernel<<<n / 256, 256, 0, mm.s>>>(x, n);
    }
    if (mm.run() != 0) return 1;
  }
  return mm.destroy();
}

int threadsMain(int rounds) {
  CK(cudaFree(nullptr));  // the context, before the threads race to make it
  std::atomic<int> ready{0};
  int rc[2] = {0, 0};
  std::thread t0([&] { rc[0] = threadBody(0, rounds, ready); });
  std::thread t1([&] { rc[1] = threadBody(1, rounds, ready); });
  t0.join();
  t1.join();
  std::printf("tracer_gpu_app threads: %s\n", rc[0] == 0 && rc[1] == 0 ? "done" : "failed");
  return rc[0] | rc[1];
}

// `tracer_gpu_app fresh-thread`: three Matmul128 runs made by a thread whose first CUDA work they
// are (no context is current on it when the first call begins; cuBLASLt's runtime makes the
// primary context current inside the call). Everything else is set up on the main thread.
int freshThreadMain() {
  CK(cudaFree(nullptr));
  Matmul128 mm;
  if (mm.create() != 0) return 1;
  int rc = 0;
  std::thread t([&] {
    for (int r = 0; r < 3 && rc == 0; ++r) rc = mm.run();
  });
  t.join();
  rc |= mm.destroy();
  std::printf("tracer_gpu_app fresh-thread: %s\n", rc == 0 ? "done" : "failed");
  return rc;
}

// `tracer_gpu_app reset`: 50 rounds of threadBody on one thread, then cudaDeviceReset (the context
// and every allocation in it freed, the tracer's fingerprint results among them), a pause longer
// than the tracer's commit period, and 50 rounds more in the new context.
int resetMain() {
  for (int phase = 0; phase < 2; ++phase) {
    std::atomic<int> ready{1};  // threadBody waits for a second thread: there is none
    if (threadBody(0, 50, ready) != 0) return 1;
    CK(cudaDeviceReset());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::printf("tracer_gpu_app reset: done\n");
  return 0;
}

// `tracer_gpu_app held-cupti LIBCUPTI`: subscribes to CUPTI itself before any CUDA call, as a
// profiler in the program would, and keeps it; then 50 rounds of threadBody. The tracer, loaded
// when the driver starts, then finds CUPTI taken. Declared here from CUPTI's documented
// signatures: the program links no CUPTI, it loads the one the tracer would.
int heldCuptiMain(const char* libcupti) {
  using Callback = void (*)(void*, int, uint32_t, const void*);
  using Subscribe = int (*)(void**, Callback, void*);
  void* lib = dlopen(libcupti, RTLD_NOW | RTLD_GLOBAL);
  auto subscribe = lib != nullptr ? reinterpret_cast<Subscribe>(dlsym(lib, "cuptiSubscribe")) : nullptr;
  if (subscribe == nullptr) {
    std::fprintf(stderr, "tracer_gpu_app held-cupti: cannot load %s: %s\n", libcupti, dlerror());
    return 1;
  }
  void* subscriber = nullptr;
  const int r = subscribe(&subscriber, [](void*, int, uint32_t, const void*) {}, nullptr);
  std::printf("tracer_gpu_app held-cupti: the program's cuptiSubscribe returned %d\n", r);
  std::fflush(stdout);
  std::atomic<int> ready{1};
  const int rc = threadBody(0, 50, ready);
  std::printf("tracer_gpu_app held-cupti: %s\n", rc == 0 ? "done" : "failed");
  return rc;
}

// `tracer_gpu_app nccl-comms`: the real NCCL's newer ways to make a communicator, on one GPU:
// ncclCommInitRankScalable from one root (all-reduce of 1000 floats), ncclCommInitAll (2000), a
// group on that one ended by ncclGroupSimulateEnd (2500, never run), a real call after it (1500),
// a split of it inside a group, whose handle NCCL gives at the group end (1200), a communicator
// initialized inside a group, which NCCL makes at the group end (1100), a split of a
// non-blocking communicator, whose handle NCCL writes later from its own thread (1300), and
// ncclCommShrink of it excluding no rank (3000; NCCL 2.28 refuses it). Prints the root's unique
// id in hex (the test derives the communicator's id from it) and what each call returned. NCCL's
// functions are declared here from their documented signatures and looked up at run time (the app
// is not linked against NCCL; it takes ncclConfig_t from NCCL's header).
int ncclCommsMain() {
  struct UniqueId {
    char internal[128];
  };
  using Comm = struct ncclComm*;
  using GetUniqueId = int (*)(UniqueId*);
  using InitScalable = int (*)(Comm*, int, int, int, UniqueId*, void*);
  using InitAll = int (*)(Comm*, int, const int*);
  using InitRank = int (*)(Comm*, int, UniqueId, int);
  using Shrink = int (*)(Comm, int*, int, Comm*, void*, int);
  using AllReduce = int (*)(const void*, void*, size_t, int, int, Comm, cudaStream_t);
  using Destroy = int (*)(Comm);
  using GroupStart = int (*)();
  using GroupEnd = int (*)();
  using Split = int (*)(Comm, int, int, Comm*, void*);
  struct SimInfo {  // ncclSimInfo_t (NCCL 2.22+): size, magic, version, estimated time
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimated_time;
  };
  using SimulateEnd = int (*)(SimInfo*);
  using GetVersion = int (*)(int*);
  using InitConfig = int (*)(Comm*, int, UniqueId, int, ncclConfig_t*);
  using AsyncError = int (*)(Comm, int*);
  constexpr int kFloat32 = 7, kSum = 0, kInProgress = 7;
  if (dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "tracer_gpu_app nccl-comms: no libnccl.so.2: %s\n", dlerror());
    return 1;
  }
  auto get_id = graph_app::global<GetUniqueId>("ncclGetUniqueId");
  auto init_scalable = graph_app::global<InitScalable>("ncclCommInitRankScalable");
  auto init_all = graph_app::global<InitAll>("ncclCommInitAll");
  auto init_rank = graph_app::global<InitRank>("ncclCommInitRank");
  auto shrink = graph_app::global<Shrink>("ncclCommShrink");
  auto all_reduce = graph_app::global<AllReduce>("ncclAllReduce");
  auto destroy = graph_app::global<Destroy>("ncclCommDestroy");
  auto group_start = graph_app::global<GroupStart>("ncclGroupStart");
  auto group_end = graph_app::global<GroupEnd>("ncclGroupEnd");
  auto split = graph_app::global<Split>("ncclCommSplit");
  auto simulate_end = graph_app::global<SimulateEnd>("ncclGroupSimulateEnd");
  auto get_version = graph_app::global<GetVersion>("ncclGetVersion");
  auto init_config = graph_app::global<InitConfig>("ncclCommInitRankConfig");
  auto async_error = graph_app::global<AsyncError>("ncclCommGetAsyncError");
  if (!init_config || !async_error || !get_id || !init_scalable || !init_all || !shrink || !all_reduce || !destroy || !group_start ||
      !simulate_end || !get_version || !group_end || !split || !init_rank) {
    std::fprintf(stderr, "tracer_gpu_app nccl-comms: an NCCL function is missing\n");
    return 1;
  }
  float* buf = nullptr;
  CK(cudaMalloc(&buf, 2 * 3000 * sizeof(float)));
  CK(cudaMemset(buf, 0, 2 * 3000 * sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  UniqueId id{};
  CK(get_id(&id));
  std::printf("tracer_gpu_app nccl-comms: unique id ");
  for (unsigned char c : id.internal) std::printf("%02x", c);
  std::printf("\n");
  Comm scalable = nullptr, all = nullptr, shrunk = nullptr;
  CK(init_scalable(&scalable, 1, 0, 1, &id, nullptr));
  CK(all_reduce(buf, buf + 3000, 1000, kFloat32, kSum, scalable, s));
  const int dev0 = 0;
  CK(init_all(&all, 1, &dev0));
  CK(all_reduce(buf, buf + 3000, 2000, kFloat32, kSum, all, s));
  int version = 0;
  CK(get_version(&version));
  SimInfo sim{sizeof(SimInfo), 0x74685283u, static_cast<unsigned int>(version), -1.0f};
  CK(group_start());
  CK(all_reduce(buf, buf + 3000, 2500, kFloat32, kSum, all, s));
  const int simulate_rc = simulate_end(&sim);
  std::printf("tracer_gpu_app nccl-comms: ncclGroupSimulateEnd returned %d (NCCL %d, estimated %.1f us)\n",
              simulate_rc, version, sim.estimated_time);
  if (simulate_rc != 0) return 1;
  CK(all_reduce(buf, buf + 3000, 1500, kFloat32, kSum, all, s));
  Comm grouped = nullptr;
  CK(group_start());
  CK(split(all, 0, 0, &grouped, nullptr));
  const bool early = grouped != nullptr;
  CK(group_end());
  std::printf("tracer_gpu_app nccl-comms: a split in a group gave its communicator %s\n",
              early ? "at the call" : grouped != nullptr ? "at the group end" : "never");
  if (grouped == nullptr) return 1;
  CK(all_reduce(buf, buf + 3000, 1200, kFloat32, kSum, grouped, s));
  UniqueId grouped_id{};
  CK(get_id(&grouped_id));
  Comm grouped_init = nullptr;
  CK(group_start());
  CK(init_rank(&grouped_init, 1, grouped_id, 0));
  CK(group_end());
  CK(all_reduce(buf, buf + 3000, 1100, kFloat32, kSum, grouped_init, s));
  // A non-blocking world, and a split of it: NCCL answers ncclSuccess or ncclInProgress (2.28.3:
  // ncclSuccess) and writes the handle from its own thread when the communicator is made; the
  // program waits as NCCL's guide says.
  auto settle = [&](Comm comm) {
    int state = kInProgress;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (state == kInProgress && std::chrono::steady_clock::now() < until) {
      if (comm != nullptr && async_error(comm, &state) != 0) return false;
    }
    return state == 0;
  };
  UniqueId nb_id{};
  CK(get_id(&nb_id));
  ncclConfig_t nonblocking = NCCL_CONFIG_INITIALIZER;
  nonblocking.blocking = 0;
  Comm nb_world = nullptr;
  const int nb_rc = init_config(&nb_world, 1, nb_id, 0, &nonblocking);
  if ((nb_rc != 0 && nb_rc != kInProgress) || !settle(nb_world)) return 1;
  Comm later = nullptr;
  const int late_rc = split(nb_world, 0, 0, &later, nullptr);
  const bool at_call = __atomic_load_n(&later, __ATOMIC_ACQUIRE) != nullptr;
  if ((late_rc != 0 && late_rc != kInProgress) || !settle(nb_world)) return 1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (__atomic_load_n(&later, __ATOMIC_ACQUIRE) == nullptr && std::chrono::steady_clock::now() < until) {
  }
  std::printf("tracer_gpu_app nccl-comms: a split of a non-blocking communicator returned %d and gave "
              "its communicator %s\n", late_rc, at_call ? "at the call" : later != nullptr ? "later" : "never");
  if (later == nullptr || !settle(later)) return 1;
  const int late_reduce = all_reduce(buf, buf + 3000, 1300, kFloat32, kSum, later, s);
  if ((late_reduce != 0 && late_reduce != kInProgress) || !settle(later)) return 1;
  int no_rank[1] = {-1};  // an empty list (NCCL 2.28 refuses a null one with ncclInvalidArgument)
  const int shrink_rc = shrink(all, no_rank, 0, &shrunk, nullptr, 0);
  std::printf("tracer_gpu_app nccl-comms: ncclCommShrink returned %d\n", shrink_rc);
  if (shrink_rc == 0) CK(all_reduce(buf, buf + 3000, 3000, kFloat32, kSum, shrunk, s));
  CK(cudaStreamSynchronize(s));
  if (shrunk != nullptr) CK(destroy(shrunk));
  CK(destroy(grouped));
  CK(destroy(grouped_init));
  CK(destroy(later));
  CK(destroy(nb_world));
  CK(destroy(all));
  CK(destroy(scalable));
  CK(cudaFree(buf));
  std::printf("tracer_gpu_app nccl-comms: done\n");
  return 0;
}

// Counts its own launches in counts[I].
template <int I>
__global__ void graph_node(int* counts) {
  if (threadIdx.x == 0) atomicAdd(&counts[I], 1);
}

// A graph built node by node: graph_node<0> -> graph_node<1> -> graph_node<2> -> a memset, launched
// 3 times, then 3 times with graph_node<1> disabled (cudaGraphNodeSetEnabled), then 3 times with it
// enabled again. DIR/graph.txt gets what the GPU counted ("node0 9", "node1 6", "node2 9") and
// "launches 9". `before_start` (recorded `--paused`): graph_node<1> is disabled before the
// recording is started through the control socket, then launched disabled, enabled, disabled
// ("node1 3").
int graphDisabledMain(const std::string& dir, bool before_start) {
  int* counts = nullptr;
  int* scratch = nullptr;
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc(&counts, 3 * sizeof(int)));
  CK(cudaMalloc(&scratch, 64));
  CK(cudaMemset(counts, 0, 3 * sizeof(int)));
  cudaGraph_t graph = nullptr;
  CK(cudaGraphCreate(&graph, 0));
  void* kernels[3] = {reinterpret_cast<void*>(graph_node<0>), reinterpret_cast<void*>(graph_node<1>),
                      reinterpret_cast<void*>(graph_node<2>)};
  cudaGraphNode_t nodes[4] = {};
  void* args[1] = {&counts};
  for (int i = 0; i < 3; ++i) {
    cudaKernelNodeParams p{};
    p.func = kernels[i];
    p.gridDim = dim3(1);
    p.blockDim = dim3(32);
    p.kernelParams = args;
    CK(cudaGraphAddKernelNode(&nodes[i], graph, i > 0 ? &nodes[i - 1] : nullptr, i > 0 ? 1 : 0, &p));
  }
  cudaMemsetParams m{};
  m.dst = scratch;
  m.value = 7;
  m.elementSize = 1;
  m.width = 64;
  m.height = 1;
  CK(cudaGraphAddMemsetNode(&nodes[3], graph, &nodes[2], 1, &m));
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  if (before_start) {
    CK(cudaGraphNodeSetEnabled(exec, nodes[1], 0));
    if (!graph_app::askTracer("start capture=meta")) {
      std::fprintf(stderr, "tracer_gpu_app graph-disabled: the tracer did not start\n");
      return 1;
    }
  }
  for (int phase = 0; phase < 3; ++phase) {
    const bool enabled = (phase == 1) == before_start;  // off, on, off; or on, off, on
    if (phase > 0) CK(cudaGraphNodeSetEnabled(exec, nodes[1], enabled ? 1 : 0));
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, s));
  }
  CK(cudaStreamSynchronize(s));
  int host[3] = {};
  CK(cudaMemcpy(host, counts, sizeof host, cudaMemcpyDeviceToHost));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  FILE* f = std::fopen((dir + "/graph.txt").c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "node0 %d\nnode1 %d\nnode2 %d\nlaunches 9\n", host[0], host[1], host[2]);
  return std::fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "held-cupti") == 0) return heldCuptiMain(argv[2]);
  if (argc >= 2 && std::strcmp(argv[1], "reset") == 0) return resetMain();
  if (argc >= 2 && std::strcmp(argv[1], "nccl-comms") == 0) return ncclCommsMain();
  if (argc >= 2 && std::strcmp(argv[1], "fresh-thread") == 0) return freshThreadMain();
  if (argc >= 3 && std::strcmp(argv[1], "graph") == 0) return graph_app::graphMain(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "graph-disabled") == 0) {
    return graphDisabledMain(argv[2], argc >= 4 && std::strcmp(argv[3], "before-start") == 0);
  }
  if (argc >= 3 && std::strcmp(argv[1], "graph-threads") == 0) {
    const char* how = argc >= 4 ? argv[3] : "";
    return graph_app::graphThreadsMain(argv[2], std::strcmp(how, "serialized") == 0,
                                       std::strcmp(how, "switching") == 0,
                                       std::strcmp(how, "serialized-reset") == 0);
  }
  if (argc >= 2 && std::strcmp(argv[1], "lt-heuristic") == 0) return lt_heuristic_app::ltHeuristicMain();
  if (argc >= 2 && std::strcmp(argv[1], "lt-epilogue") == 0) return lt_epilogue_app::ltEpilogueMain();
  if (argc >= 2 && std::strcmp(argv[1], "threads") == 0) return threadsMain(argc >= 3 ? std::atoi(argv[2]) : 200);
  const int n = 1 << 16;
  float *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, n * sizeof(float)));
  CK(cudaMalloc(&b, n * sizeof(float)));
  CK(cudaMemset(a, 0, n * sizeof(float)));
  CK(cudaMemset(b, 0, n * sizeof(float)));
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

  // 1. Four launches on each of two streams, alternating: scale (s1), add_one (s2), ...
  nvtxRangePushA("step 0");
  for (int i = 0; i < 4; ++i) {
    scale_kernel<<<n / 256, 256, 0, s1>>>(a, n);
    add_one_kernel<<<n / 128, 128, 0, s2>>>(b, n);
  }
  CK(cudaGetLastError());
  nvtxRangePop();

  // 2. cuBLASLt: D(256x128) = A(256x64) * B(64x128), fp32, column major.
  const int m = 256, nn = 128, k = 64;
  float *A, *B, *D;
  void* ws;
  const size_t ws_bytes = 4 << 20;
  CK(cudaMalloc(&A, m * k * sizeof(float)));
  CK(cudaMalloc(&B, k * nn * sizeof(float)));
  CK(cudaMalloc(&D, m * nn * sizeof(float)));
  CK(cudaMalloc(&ws, ws_bytes));
  fill_kernel<<<(m * k + 255) / 256, 256, 0, s1>>>(A, m * k, 97, 0.25f, 0.0f);   // A[i] = (i % 97) / 4
  fill_kernel<<<(k * nn + 255) / 256, 256, 0, s1>>>(B, k * nn, 89, 0.5f, -3.0f);  // B[i] = (i % 89) / 2 - 3
  nvtxRangePushA("step 1");
  nvtxRangePushA("layer 0");
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, nn, k));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, nn, m));
  float alpha = 1.0f, beta = 0.0f;
  CK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, nullptr, ws, ws_bytes, s1));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = ws_bytes;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found));
  if (found < 1) return 1;
  CK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo, ws, ws_bytes, s1));
  nvtxRangePop();
  nvtxRangePop();

  // 3. A CUDA graph of two kernels, captured on s2 and replayed three times.
  CK(cudaStreamSynchronize(s2));
  nvtxRangePushA("step 2");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
  graph_first_kernel<<<n / 256, 256, 0, s2>>>(b, n);
  graph_second_kernel<<<n / 512, 512, 0, s2>>>(b, n);
  CK(cudaStreamEndCapture(s2, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, s2));
  CK(cudaDeviceSynchronize());
  nvtxRangePop();

  CK(cublasLtMatmulPreferenceDestroy(pref));
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(ld));
  CK(cublasLtMatmulDescDestroy(desc));
  CK(cublasLtDestroy(lt));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  std::printf("tracer_gpu_app: done\n");
  return 0;
}
