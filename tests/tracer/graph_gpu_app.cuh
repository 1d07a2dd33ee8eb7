// `tracer_gpu_app graph DIR`: library ops captured into CUDA graphs, for gpu_graph_test.cc
// (`graph-threads DIR`, one graph launched from two threads at once, is at the end).
//
// A chain of two GEMMs, y = W (A x), on one stream: a cuBLASLt matmul (D1 = A X) and a classic
// cublasGemmEx (Y = W D1), both fp32, column major, each after a kernel of the app's own
// (app_marker_kernel, on a scratch buffer). Then, if libnccl can be loaded, a world-size-1
// ncclAllReduce (Z = sum of Y over one rank). Each is run once eagerly (warm-up: cuBLAS and NCCL
// set themselves up, the tracer its result memory), then captured: the GEMMs into one graph, the
// all-reduce into a second one, and both graphs are launched kReplays times. Before every launch X
// gets new values (replay r's pattern) and D1, Y and Z are poisoned (0xff bytes), so a digest taken
// at the wrong moment cannot match. After every launch the program copies X, D1, Y and Z back and
// writes them to DIR/replay<r>_<name>.bin (A and W, constant, to DIR/A.bin and DIR/W.bin), and
// DIR/graph.txt says what ran. With GRAPH_APP_NEW_WEIGHTS=1 in the environment A and W get new
// values before every launch too, written to DIR/replay<r>_A.bin and DIR/replay<r>_W.bin. With
// GRAPH_APP_RECAPTURE_MS=T, before every launch but the first the app waits T ms, destroys the
// GEMMs' executable graph and graph and captures them again (as programs that recapture do): each
// launch then replays a capture of its own, and graph.txt says "recaptured 1". With
// GRAPH_APP_DISABLE_MARKER=R, before launch R the app disables the GEMMs' graph's root node (its
// first app_marker_kernel) with cudaGraphNodeSetEnabled, and graph.txt says "disabled_at R". With
// GRAPH_APP_REFUSED_GEMM=1 the GEMMs' capture ends with a cublasGemmEx that cuBLAS refuses (the
// types of A and B differ), in place on Y over half its columns; graph.txt says "refused S", S
// cuBLAS's status (the first capture only: not with GRAPH_APP_RECAPTURE_MS). cuBLAS
// and NCCL are loaded with dlopen(RTLD_GLOBAL) and called through the global scope, so the
// tracer's LD_PRELOAD wrappers see the calls (the app links only cudart and cuBLASLt).
#pragma once

#include <cublas_api.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graph_threads_values.h"

namespace graph_app {

constexpr int kReplays = 4;

#define GK(call)                                                                          \
  do {                                                                                    \
    auto e_ = (call);                                                                     \
    if (static_cast<int>(e_) != 0) {                                                      \
      std::fprintf(stderr, "tracer_gpu_app graph: %s failed (%d)\n", #call, static_cast<int>(e_)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

__global__ void fill(float* x, int n, int mul, int add, int mod, int shift) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>((i * mul + add) % mod - shift);
}

// A kernel of the program's own before each GEMM (in the graph too): it touches no operand, and a
// replayed GEMM must not take it for one of its kernels.
__global__ void app_marker_kernel(float* scratch, int i) {
  if (threadIdx.x == 0) scratch[i] += 1.0f;
}

// NCCL's C API, declared here (the app is built without NCCL's headers).
using NcclComm = struct ncclComm*;
constexpr int kNcclFloat32 = 7, kNcclSum = 0;
using NcclCommInitAll = int (*)(NcclComm*, int, const int*);
using NcclAllReduce = int (*)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t);

// cublasGemmEx (C++ overloads it with a 64-bit variant).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, const void*,
                                  cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);

template <typename Fn>
Fn global(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));  // the tracer's wrapper comes first
}

bool dump(const std::string& dir, const std::string& name, const float* dev, size_t n) {
  std::vector<float> host(n);
  if (cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  FILE* f = std::fopen((dir + "/" + name + ".bin").c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite(host.data(), sizeof(float), n, f) == n;
  return std::fclose(f) == 0 && ok;
}

struct Gemms {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lx = nullptr, ld = nullptr;
  cublasHandle_t blas = nullptr;
  GemmEx gemm_ex = nullptr;
  float *A = nullptr, *X = nullptr, *D1 = nullptr, *W = nullptr, *Y = nullptr;
  float* scratch = nullptr;  // app_marker_kernel's
  void* ws = nullptr;
  size_t ws_bytes = 4 << 20;
  cudaStream_t s = nullptr;

  // D1 = A X (cuBLASLt), then Y = W D1 (cublasGemmEx).
  int run() {
    const float alpha = 1.0f, beta = 0.0f;
    app_marker_kernel<<<1, 32, 0, s>>>(scratch, 0);
    GK(cudaGetLastError());
    GK(cublasLtMatmul(lt, desc, &alpha, A, la, X, lx, &beta, D1, ld, D1, ld, nullptr, ws, ws_bytes, s));
    app_marker_kernel<<<1, 32, 0, s>>>(scratch, 1);
    GK(cudaGetLastError());
    GK(gemm_ex(blas, CUBLAS_OP_N, CUBLAS_OP_N, kM2, kN, kM, &alpha, W, CUDA_R_32F, kM2, D1,
               CUDA_R_32F, kM, &beta, Y, CUDA_R_32F, kM2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
  }
};

// The GEMMs' stream, buffers (unfilled) and handles.
inline int setUp(Gemms& g) {
  GK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
  GK(cudaMalloc(&g.A, kM * kK * sizeof(float)));
  GK(cudaMalloc(&g.X, kK * kN * sizeof(float)));
  GK(cudaMalloc(&g.D1, kM * kN * sizeof(float)));
  GK(cudaMalloc(&g.W, kM2 * kM * sizeof(float)));
  GK(cudaMalloc(&g.Y, kM2 * kN * sizeof(float)));
  GK(cudaMalloc(&g.ws, g.ws_bytes));
  GK(cudaMalloc(&g.scratch, 2 * sizeof(float)));
  GK(cublasLtCreate(&g.lt));
  GK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  GK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_32F, kM, kK, kM));
  GK(cublasLtMatrixLayoutCreate(&g.lx, CUDA_R_32F, kK, kN, kK));
  GK(cublasLtMatrixLayoutCreate(&g.ld, CUDA_R_32F, kM, kN, kM));
  void* blas_lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    if ((blas_lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) != nullptr) break;
  }
  if (blas_lib == nullptr) {
    std::fprintf(stderr, "tracer_gpu_app graph: cannot load libcublas: %s\n", dlerror());
    return 1;
  }
  auto create = global<decltype(&cublasCreate_v2)>("cublasCreate_v2");
  auto set_stream = global<decltype(&cublasSetStream_v2)>("cublasSetStream_v2");
  auto set_ws = global<decltype(&cublasSetWorkspace_v2)>("cublasSetWorkspace_v2");
  g.gemm_ex = global<GemmEx>("cublasGemmEx");
  if (!create || !set_stream || !set_ws || !g.gemm_ex) return 1;
  GK(create(&g.blas));
  GK(set_stream(g.blas, g.s));
  void* blas_ws = nullptr;
  GK(cudaMalloc(&blas_ws, g.ws_bytes));
  GK(set_ws(g.blas, blas_ws, g.ws_bytes));  // no allocation inside the capture
  return 0;
}

inline int graphMain(const std::string& dir) {
  Gemms g;
  if (setUp(g) != 0) return 1;
  float* Z = nullptr;
  GK(cudaMalloc(&Z, kM2 * kN * sizeof(float)));
  fill<<<(kM * kK + 255) / 256, 256, 0, g.s>>>(g.A, kM * kK, 1, 0, 17, 8);
  fill<<<(kM2 * kM + 255) / 256, 256, 0, g.s>>>(g.W, kM2 * kM, 1, 0, 11, 5);
  fill<<<(kK * kN + 255) / 256, 256, 0, g.s>>>(g.X, kK * kN, 3, 1, 13, 6);
  GK(cudaGetLastError());

  // NCCL, one rank: optional (the test reads graph.txt to know).
  NcclComm comm = nullptr;
  NcclAllReduce all_reduce = nullptr;
  if (dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL) != nullptr) {
    auto init_all = global<NcclCommInitAll>("ncclCommInitAll");
    all_reduce = global<NcclAllReduce>("ncclAllReduce");
    const int dev0 = 0;
    if (!init_all || !all_reduce || init_all(&comm, 1, &dev0) != 0) all_reduce = nullptr;
  }
  auto reduce = [&]() { return all_reduce(g.Y, Z, kM2 * kN, kNcclFloat32, kNcclSum, comm, g.s); };

  // Warm-up, eagerly.
  if (g.run() != 0) return 1;
  if (all_reduce != nullptr) GK(reduce());
  GK(cudaStreamSynchronize(g.s));

  // Capture: the GEMMs into one graph, the all-reduce into another.
  cudaGraph_t gemm_graph = nullptr, reduce_graph = nullptr;
  cudaGraphExec_t gemm_exec = nullptr, reduce_exec = nullptr;
  const char* refuse = std::getenv("GRAPH_APP_REFUSED_GEMM");
  int refused = 0;
  GK(cudaStreamBeginCapture(g.s, cudaStreamCaptureModeGlobal));
  if (g.run() != 0) return 1;
  if (refuse != nullptr && std::strcmp(refuse, "1") == 0) {
    // A GEMM cuBLAS refuses (A declared half, B float), in place on Y (beta 1: its inputs are
    // fingerprinted before the call), over half of Y's columns.
    const float alpha = 1.0f, beta = 1.0f;
    refused = static_cast<int>(g.gemm_ex(g.blas, CUBLAS_OP_N, CUBLAS_OP_N, kM2, kN / 2, kM, &alpha, g.W,
                                         CUDA_R_16F, kM2, g.D1, CUDA_R_32F, kM, &beta, g.Y, CUDA_R_32F,
                                         kM2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (refused == 0) {
      std::fprintf(stderr, "tracer_gpu_app graph: cuBLAS took a half A with a float B\n");
      return 1;
    }
  }
  GK(cudaStreamEndCapture(g.s, &gemm_graph));
  GK(cudaGraphInstantiate(&gemm_exec, gemm_graph, 0));
  bool nccl_graph = false;
  if (all_reduce != nullptr) {
    GK(cudaStreamBeginCapture(g.s, cudaStreamCaptureModeGlobal));
    int r = reduce();
    cudaError_t end = cudaStreamEndCapture(g.s, &reduce_graph);
    nccl_graph = r == 0 && end == cudaSuccess &&
                 cudaGraphInstantiate(&reduce_exec, reduce_graph, 0) == cudaSuccess;
    if (!nccl_graph) std::fprintf(stderr, "tracer_gpu_app graph: NCCL under graph capture failed\n");
    (void)cudaGetLastError();
  }

  if (!dump(dir, "A", g.A, kM * kK) || !dump(dir, "W", g.W, kM2 * kM)) return 1;
  const char* new_weights = std::getenv("GRAPH_APP_NEW_WEIGHTS");
  const char* recapture = std::getenv("GRAPH_APP_RECAPTURE_MS");
  const int recapture_ms = recapture != nullptr ? std::atoi(recapture) : 0;
  const char* disable = std::getenv("GRAPH_APP_DISABLE_MARKER");
  const int disable_at = disable != nullptr ? std::atoi(disable) : -1;
  for (int r = 0; r < kReplays; ++r) {
    if (r == disable_at) {
      cudaGraphNode_t root = nullptr;
      size_t roots = 1;
      GK(cudaGraphGetRootNodes(gemm_graph, &root, &roots));
      cudaGraphNodeType type{};
      GK(cudaGraphNodeGetType(root, &type));
      if (roots != 1 || type != cudaGraphNodeTypeKernel) {
        std::fprintf(stderr, "tracer_gpu_app graph: the GEMMs' graph's root is not one kernel node\n");
        return 1;
      }
      GK(cudaGraphNodeSetEnabled(gemm_exec, root, 0));
    }
    if (recapture_ms > 0 && r > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(recapture_ms));
      GK(cudaGraphExecDestroy(gemm_exec));
      GK(cudaGraphDestroy(gemm_graph));
      GK(cudaStreamBeginCapture(g.s, cudaStreamCaptureModeGlobal));
      if (g.run() != 0) return 1;
      GK(cudaStreamEndCapture(g.s, &gemm_graph));
      GK(cudaGraphInstantiate(&gemm_exec, gemm_graph, 0));
    }
    if (new_weights != nullptr && std::strcmp(new_weights, "1") == 0) {
      fill<<<(kM * kK + 255) / 256, 256, 0, g.s>>>(g.A, kM * kK, 3 + r, 5 * r + 2, 19, 9);
      fill<<<(kM2 * kM + 255) / 256, 256, 0, g.s>>>(g.W, kM2 * kM, 2 + r, 3 * r + 1, 23, 11);
      GK(cudaGetLastError());
      GK(cudaStreamSynchronize(g.s));  // dump copies on the legacy stream, which does not wait for g.s
      const std::string p = "replay" + std::to_string(r) + "_";
      if (!dump(dir, p + "A", g.A, kM * kK) || !dump(dir, p + "W", g.W, kM2 * kM)) return 1;
    }
    fill<<<(kK * kN + 255) / 256, 256, 0, g.s>>>(g.X, kK * kN, 5 + 2 * r, 3 * r + 1, 29, 14);
    GK(cudaGetLastError());
    GK(cudaMemsetAsync(g.D1, 0xff, kM * kN * sizeof(float), g.s));
    GK(cudaMemsetAsync(g.Y, 0xff, kM2 * kN * sizeof(float), g.s));
    GK(cudaMemsetAsync(Z, 0xff, kM2 * kN * sizeof(float), g.s));
    GK(cudaGraphLaunch(gemm_exec, g.s));
    if (nccl_graph) GK(cudaGraphLaunch(reduce_exec, g.s));
    GK(cudaStreamSynchronize(g.s));
    const std::string p = "replay" + std::to_string(r) + "_";
    if (!dump(dir, p + "X", g.X, kK * kN) || !dump(dir, p + "D1", g.D1, kM * kN) ||
        !dump(dir, p + "Y", g.Y, kM2 * kN) || (nccl_graph && !dump(dir, p + "Z", Z, kM2 * kN))) {
      return 1;
    }
  }
  FILE* f = std::fopen((dir + "/graph.txt").c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "replays %d\nnccl %d\nrecaptured %d\ndisabled_at %d\nrefused %d\n", kReplays,
               nccl_graph ? 1 : 0, recapture_ms > 0 ? 1 : 0, disable_at, refused);
  std::fclose(f);
  GK(cudaGraphExecDestroy(gemm_exec));
  GK(cudaGraphDestroy(gemm_graph));
  if (nccl_graph) {
    GK(cudaGraphExecDestroy(reduce_exec));
    GK(cudaGraphDestroy(reduce_graph));
  }
  std::printf("tracer_gpu_app graph: done (nccl %d)\n", nccl_graph ? 1 : 0);
  return 0;
}

// One request to the tracer's control socket (the one `detrace attach` uses: the run directory's
// proc-<pid>.dtrace-control names it), e.g. "stop" or "start capture=digest". True if it said ok.
inline bool askTracer(const std::string& request) {
  const char* out = std::getenv("DETRACE_OUT_DIR");
  if (out == nullptr) return false;
  std::ifstream pointer(std::string(out) + "/proc-" + std::to_string(getpid()) + ".dtrace-control");
  std::string line, path;
  while (std::getline(pointer, line)) {
    if (line.rfind("socket=", 0) == 0) path = line.substr(7);
  }
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  const std::string sent = request + "\n";
  ok = ok && write(fd, sent.data(), sent.size()) == static_cast<ssize_t>(sent.size());
  char reply[256] = {};
  ok = ok && read(fd, reply, sizeof reply - 1) >= 2 && std::strncmp(reply, "ok", 2) == 0;
  close(fd);
  return ok;
}

// ---- `tracer_gpu_app graph-threads DIR [serialized|switching|serialized-reset]` ----
// The GEMM chain captured into one graph after kernels that set X from a device counter of the
// graph's executions (its k-th execution gets X = threadsX(., k)) and poison D1 and Y, then
// launched kThreadLaunches times from each of kThreads threads, each on a stream of its own, with
// no order between the threads but CUDA's own between launches of one graph. `serialized`: the
// threads take a mutex around each launch call, as CUDA's rules ask of calls on one graph object;
// without it their launch calls may overlap (which those rules forbid, and the tracer must survive).
// `switching`: serialized, a launch every 20 ms, while a third thread stops and starts the recording
// through the control socket (kSwitches times, or GRAPH_APP_SWITCHES): launches in progress at a switch, launches made
// while paused, on either stream, and recorded ones after them. `serialized-reset`: serialized,
// then a cudaDeviceReset right after the last launch's results are read back, while the tracer
// still holds the latest launches' results (it writes them once their ops are placed).
// A, W and X hold small integers, so D1 and Y are exact and the test computes them itself. DIR gets
// A.bin, W.bin and graph.txt (launches made, executions counted on the GPU, and executions that
// ran at the same time as another: CUDA orders one graph's executions, but unserialized launch
// calls are undefined behaviour, and a test must not blame the tracer for what CUDA did then).

__global__ void x_from_counter(float* x, int n, const int* counter, int* seen) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int k = *counter;
  if (i < n) x[i] = threadsX(i, k);
  if (i == 0) *seen = k;
}

// The execution's number was `seen` when it set X; another execution in between moved it.
__global__ void count_up(int* counter, const int* seen, int* overlaps) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const int before = atomicAdd(counter, 1);
    if (before != *seen) atomicAdd(overlaps, 1);
  }
}

__global__ void fill_small(float* x, int n, int which) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = which == 0 ? threadsA(i) : threadsW(i);
}

inline int graphThreadsMain(const std::string& dir, bool serialized, bool switching = false,
                            bool reset = false) {
  serialized = serialized || switching || reset;
  Gemms g;
  if (setUp(g) != 0) return 1;
  int* counter = nullptr;  // [0] executions, [1] the last one's k as it set X, [2] overlaps
  GK(cudaMalloc(&counter, 3 * sizeof(int)));
  fill_small<<<(kM * kK + 255) / 256, 256, 0, g.s>>>(g.A, kM * kK, 0);
  fill_small<<<(kM2 * kM + 255) / 256, 256, 0, g.s>>>(g.W, kM2 * kM, 1);
  GK(cudaMemsetAsync(g.X, 0, kK * kN * sizeof(float), g.s));
  GK(cudaGetLastError());
  if (g.run() != 0) return 1;  // warm-up, eagerly (the tracer's memory too)
  GK(cudaMemsetAsync(counter, 0, 3 * sizeof(int), g.s));
  GK(cudaStreamSynchronize(g.s));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  GK(cudaStreamBeginCapture(g.s, cudaStreamCaptureModeGlobal));
  x_from_counter<<<(kK * kN + 255) / 256, 256, 0, g.s>>>(g.X, kK * kN, counter, counter + 1);
  count_up<<<1, 32, 0, g.s>>>(counter, counter + 1, counter + 2);
  GK(cudaMemsetAsync(g.D1, 0xff, kM * kN * sizeof(float), g.s));
  GK(cudaMemsetAsync(g.Y, 0xff, kM2 * kN * sizeof(float), g.s));
  if (g.run() != 0) return 1;
  GK(cudaStreamEndCapture(g.s, &graph));
  GK(cudaGraphInstantiate(&exec, graph, 0));

  std::atomic<int> ready{0}, launched{0};
  std::mutex launch_mu;
  int rc[kThreads] = {};
  auto body = [&](int t) {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      rc[t] = 1;
      ++ready;
      return;
    }
    int i = 0;
    if (!serialized && t == 0) {  // results first, then the threads' calls may overlap
      for (; i < kStaggerLaunches && rc[t] == 0; ++i) {
        if (cudaGraphLaunch(exec, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) rc[t] = 1;
      }
    }
    ++ready;
    while (ready.load() < kThreads) {
    }
    for (; i < kThreadLaunches && rc[t] == 0; ++i) {
      std::unique_lock<std::mutex> turn(launch_mu, std::defer_lock);
      if (serialized) turn.lock();
      if (cudaGraphLaunch(exec, s) != cudaSuccess) rc[t] = 1;
      launched.fetch_add(1);
      if (serialized) turn.unlock();
      if (i % 16 == 15 && cudaStreamSynchronize(s) != cudaSuccess) rc[t] = 1;
      if (switching) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) rc[t] = 1;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
  int switched = 0;
  // GRAPH_APP_SWITCHES: more switches than the test's kSwitches (a rare failure found sooner).
  const char* switches_env = std::getenv("GRAPH_APP_SWITCHES");
  int switches = kSwitches;
  if (switches_env != nullptr) {
    char* end = nullptr;
    const long n = std::strtol(switches_env, &end, 10);
    if (end == switches_env || *end != '\0' || n < 1 || n > 1000) {
      std::fprintf(stderr, "tracer_gpu_app: GRAPH_APP_SWITCHES must be a number from 1 to 1000\n");
      return 2;
    }
    switches = static_cast<int>(n);
  }
  if (switching) {
    while (ready.load() < kThreads) {
    }
    // When each switch was answered, in launches made so far (a failing test prints it).
    std::string when;
    for (int i = 0; i < switches; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      if (!askTracer("stop")) break;
      when += " stopped after " + std::to_string(launched.load()) + ",";
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      if (!askTracer("start capture=digest")) break;
      when += " started after " + std::to_string(launched.load()) + ";";
      ++switched;
    }
    std::printf("tracer_gpu_app graph-threads: launches made when the switches were answered:%s\n",
                when.c_str());
  }
  for (std::thread& t : threads) t.join();
  if (switching && switched != switches) {
    std::fprintf(stderr, "tracer_gpu_app graph-threads: only %d of %d switches answered\n", switched, switches);
    return 1;
  }
  for (int t = 0; t < kThreads; ++t) {
    if (rc[t] != 0) {
      std::fprintf(stderr, "tracer_gpu_app graph-threads: thread %d failed\n", t);
      return 1;
    }
  }
  int counts[3] = {};
  GK(cudaMemcpy(counts, counter, sizeof counts, cudaMemcpyDeviceToHost));
  const int executed = counts[0], overlapping = counts[2];
  if (!dump(dir, "A", g.A, kM * kK) || !dump(dir, "W", g.W, kM2 * kM)) return 1;
  FILE* f = std::fopen((dir + "/graph.txt").c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "launches %d\nexecuted %d\noverlapping_executions %d\n", kThreads * kThreadLaunches,
               executed, overlapping);
  std::fclose(f);
  if (reset) {
    GK(cudaDeviceReset());  // the graph, its executable graph and every buffer go with it
  } else {
    GK(cudaGraphExecDestroy(exec));
    GK(cudaGraphDestroy(graph));
  }
  std::printf("tracer_gpu_app graph-threads: done (%d executions)\n", executed);
  return 0;
}

#undef GK

}  // namespace graph_app
