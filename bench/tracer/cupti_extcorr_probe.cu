// cupti_extcorr_probe: does CUPTI tie kernel records to an external correlation id when no launch
// callback and no API activity kind is on? The question behind an activity-records-only `meta`
// (docs/overhead.md): the LD_PRELOAD wrappers would push the library op's id around each cuBLAS or
// NCCL call, and its kernels would find their parent op through CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION
// records instead of through launch callbacks.
//
//   cupti_extcorr_probe [kernels|api] [latency] [marker]
//     kernels (default): CONCURRENT_KERNEL + EXTERNAL_CORRELATION only
//     api:               the same plus RUNTIME and DRIVER API records (what Kineto enables)
//     latency:           also the kernels' queued/submitted timestamps
//                        (cuptiActivityEnableLatencyTimestamps): whether `queued` falls inside the
//                        CPU window (cuptiGetTimestamp before and after) of the call that launched
//                        the kernel, the other way to find a kernel's library op without callbacks
//     marker:            also a CUPTI callback on cuDriverGetVersion only, called at the start and
//                        end of each group: whether every kernel's correlation id falls between
//                        the two calls' ids (a library op's place among kernel records, with no
//                        launch callback), and what one such marker call costs
//
// The program launches, with an external id pushed around each group: an empty kernel through
// the runtime (id 1001), the same kernel through cuLaunchKernel (id 1002), a cuBLASLt matmul
// (id 1003), and an empty kernel with no id pushed. It prints every kernel record with the
// external id its correlation id maps to (or "none"), one line per record, then a verdict, and the
// cost of a push + pop pair on this thread (median of 9 runs of 100000 pairs). Exit status 0 when
// it ran, whatever the verdict; 1 when a CUDA, cuBLASLt or CUPTI call failed.
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

#define PROBE_CHECK(call)                                                            \
  do {                                                                               \
    if (!(call)) {                                                                   \
      std::fprintf(stderr, "cupti_extcorr_probe: %s failed (line %d)\n", #call, __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr auto kExtKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

struct KernelRecord {
  std::string name;
  uint32_t correlation = 0;
  uint64_t queued = 0;  // CUPTI_TIMESTAMP_UNKNOWN (0) unless latency timestamps are on
};

// The CPU window of each group of launches, in CUPTI's clock.
struct Window {
  uint64_t id = 0;  // the external id pushed around it; 0: none
  uint64_t begin = 0, end = 0;
  uint32_t marker_begin = 0, marker_end = 0;  // marker mode: the correlation ids around it
};
std::vector<Window> g_windows;

uint64_t now() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

// The correlation id CUPTI gave the last cuDriverGetVersion call (marker mode).
thread_local uint32_t t_marker_corr = 0;
CUpti_SubscriberHandle g_subscriber = nullptr;

void CUPTIAPI onMarker(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid != CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) t_marker_corr = cb->correlationId;
}

// A marker call: its correlation id (0 when marker mode is off).
uint32_t marker() {
  if (g_subscriber == nullptr) return 0;
  int version = 0;
  cuDriverGetVersion(&version);
  return t_marker_corr;
}

std::mutex g_mu;
std::vector<KernelRecord> g_kernels;
std::map<uint32_t, uint64_t> g_external;  // CUPTI correlation id -> external id
long long g_api_records = 0;

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard lk(g_mu);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        g_kernels.push_back({k->name != nullptr ? k->name : "?", k->correlationId, k->queued});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        g_external[e->correlationId] = e->externalId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: ++g_api_records; break;
      default: break;
    }
  }
  std::free(buffer);
}

__global__ void emptyKernel() {}

bool ok(cudaError_t e) { return e == cudaSuccess; }
bool ok(CUresult r) { return r == CUDA_SUCCESS; }
bool ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
bool ok(CUptiResult r) { return r == CUPTI_SUCCESS; }

void push(uint64_t id) { PROBE_CHECK(ok(cuptiActivityPushExternalCorrelationId(kExtKind, id))); }
void pop() {
  uint64_t last = 0;
  PROBE_CHECK(ok(cuptiActivityPopExternalCorrelationId(kExtKind, &last)));
}

// A 64x64x64 fp32 matmul through cuBLASLt with its default heuristic.
void matmul(cublasLtHandle_t lt, float* a, float* b, float* c, void* ws, size_t ws_bytes) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  PROBE_CHECK(ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F)));
  PROBE_CHECK(ok(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 64, 64, 64)));
  PROBE_CHECK(ok(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 64, 64, 64)));
  PROBE_CHECK(ok(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 64, 64, 64)));
  const float alpha = 1.0f, beta = 0.0f;
  PROBE_CHECK(ok(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, nullptr, ws,
                                ws_bytes, nullptr)));
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
}

double markerNs() {
  constexpr int kCalls = 100000;
  std::vector<double> runs;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) (void)marker();
    const auto t1 = std::chrono::steady_clock::now();
    runs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kCalls);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

double pushPopNs() {
  constexpr int kPairs = 100000;
  std::vector<double> runs;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kPairs; ++i) {
      cuptiActivityPushExternalCorrelationId(kExtKind, static_cast<uint64_t>(i));
      cuptiActivityPopExternalCorrelationId(kExtKind, nullptr);
    }
    const auto t1 = std::chrono::steady_clock::now();
    runs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kPairs);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool api = false, latency = false, markers = false;
  for (int i = 1; i < argc; ++i) {
    api |= std::strcmp(argv[i], "api") == 0;
    latency |= std::strcmp(argv[i], "latency") == 0;
    markers |= std::strcmp(argv[i], "marker") == 0;
  }
  PROBE_CHECK(ok(cudaSetDevice(0)));
  PROBE_CHECK(ok(cudaFree(nullptr)));
  PROBE_CHECK(ok(cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted)));
  PROBE_CHECK(ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)));
  PROBE_CHECK(ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)));
  if (latency) PROBE_CHECK(ok(cuptiActivityEnableLatencyTimestamps(1)));
  if (markers) {
    PROBE_CHECK(ok(cuptiSubscribe(&g_subscriber, onMarker, nullptr)));
    PROBE_CHECK(ok(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                       CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion)));
  }
  if (api) {
    PROBE_CHECK(ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME)));
    PROBE_CHECK(ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER)));
  }

  cudaStream_t stream = nullptr;
  PROBE_CHECK(ok(cudaStreamCreate(&stream)));
  float *a = nullptr, *b = nullptr, *c = nullptr;
  void* ws = nullptr;
  const size_t ws_bytes = size_t{4} << 20;
  PROBE_CHECK(ok(cudaMalloc(&a, 64 * 64 * sizeof(float))));
  PROBE_CHECK(ok(cudaMalloc(&b, 64 * 64 * sizeof(float))));
  PROBE_CHECK(ok(cudaMalloc(&c, 64 * 64 * sizeof(float))));
  PROBE_CHECK(ok(cudaMalloc(&ws, ws_bytes)));
  PROBE_CHECK(ok(cudaMemset(a, 0, 64 * 64 * sizeof(float))));
  PROBE_CHECK(ok(cudaMemset(b, 0, 64 * 64 * sizeof(float))));
  cublasLtHandle_t lt = nullptr;
  PROBE_CHECK(ok(cublasLtCreate(&lt)));
  CUfunction fn = nullptr;
  PROBE_CHECK(ok(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(emptyKernel))));

  g_windows.push_back({1001, now(), 0, marker(), 0});
  push(1001);
  emptyKernel<<<1, 32, 0, stream>>>();
  PROBE_CHECK(ok(cudaGetLastError()));
  pop();
  g_windows.back().marker_end = marker();
  g_windows.back().end = now();
  g_windows.push_back({1002, now(), 0, marker(), 0});
  push(1002);
  PROBE_CHECK(ok(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr)));
  pop();
  g_windows.back().marker_end = marker();
  g_windows.back().end = now();
  g_windows.push_back({1003, now(), 0, marker(), 0});
  push(1003);
  matmul(lt, a, b, c, ws, ws_bytes);
  pop();
  g_windows.back().marker_end = marker();
  g_windows.back().end = now();
  g_windows.push_back({0, now(), 0, marker(), 0});
  emptyKernel<<<1, 32, 0, stream>>>();  // no external id
  PROBE_CHECK(ok(cudaGetLastError()));
  g_windows.back().marker_end = marker();
  g_windows.back().end = now();
  PROBE_CHECK(ok(cudaDeviceSynchronize()));
  PROBE_CHECK(ok(cuptiActivityFlushAll(1)));

  std::lock_guard lk(g_mu);
  std::printf("mode: %s; %zu kernel records, %zu external correlation records, %lld API records\n",
              api ? "kernels + external correlation + runtime/driver API records"
                  : "kernels + external correlation only",
              g_kernels.size(), g_external.size(), g_api_records);
  if (markers) {
    for (const Window& w : g_windows) {
      std::printf("group %llu: marker correlation ids %u .. %u\n", static_cast<unsigned long long>(w.id),
                  w.marker_begin, w.marker_end);
    }
  }
  int tied = 0, placed = 0, between = 0;
  for (const KernelRecord& k : g_kernels) {
    auto it = g_external.find(k.correlation);
    // The window whose CPU interval holds the kernel's queued time, if any.
    const Window* in = nullptr;
    for (const Window& w : g_windows) {
      if (k.queued != 0 && k.queued >= w.begin && k.queued <= w.end) in = &w;
    }
    std::printf("kernel corr %u -> %s  queued %s  %.60s\n", k.correlation,
                it != g_external.end() ? std::to_string(it->second).c_str() : "none",
                k.queued == 0 ? "unknown"
                : in != nullptr ? ("in window " + std::to_string(in->id)).c_str()
                                : "outside every window",
                k.name.c_str());
    tied += it != g_external.end();
    placed += in != nullptr;
    for (const Window& w : g_windows) {
      if (w.marker_begin != 0 && k.correlation > w.marker_begin && k.correlation < w.marker_end) ++between;
    }
  }
  std::printf("verdict: %d of %zu kernel records tied to an external id (expected: all but the last "
              "launch, whose id none was pushed)\n",
              tied, g_kernels.size());
  if (latency) {
    std::printf("verdict: %d of %zu kernel records queued inside the CPU window of their call\n",
                placed, g_kernels.size());
  }
  if (markers) {
    std::printf("verdict: %d of %zu kernel records have a correlation id between their group's two "
                "marker calls' (expected: all)\n", between, g_kernels.size());
    std::printf("marker call (cuDriverGetVersion with its callback): %.0f ns (median of 9 x 100000)\n",
                markerNs());
  }
  std::printf("push + pop of an external id: %.0f ns per pair (median of 9 x 100000)\n", pushPopNs());
  cublasLtDestroy(lt);
  return 0;
}
