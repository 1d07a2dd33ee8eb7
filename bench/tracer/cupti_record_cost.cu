// cupti_record_cost: what CUPTI's kernel activity records and a marker callback cost the thread
// that launches, measured so that the host's speed drifting does not enter the figure.
//
// Whole-loop timings on the GPU machine move by up to 2x within seconds (docs/overhead.md), so a
// loop timed with records and another timed without cannot resolve a cost of a few percent. Here
// the two sides alternate every few hundred microseconds and only paired differences are kept:
//   records  two contexts on one device, kernel records enabled for one of them only
//            (cuptiActivityEnableContext; with --toggle, or where that is refused, records are
//            enabled and disabled process-wide between blocks instead). Blocks of --launches
//            launches of an empty kernel (cudaLaunchKernel, as PyTorch calls it) alternate between
//            the contexts, which goes first alternating too; only the launch calls are timed (the
//            block's synchronisation is not).
//   marker   blocks of cuDriverGetVersion calls with its API callback enabled and disabled
//            (detrace places library calls among kernel records by such a call's correlation id).
//   intercept  blocks of launches (records off) with that same callback enabled and disabled:
//            whether one driver-API callback being on taxes every launch, as detrace keeps it on
//            for as long as it records.
//   params   blocks of cuLaunchKernel calls (records off) of an empty kernel taking 800 bytes of
//            parameters, as a digest batch of 8 entries does, against one taking 8 bytes: what the
//            digest launch's parameter block costs the GEMM's thread beyond a launch's own cost.
// A CUPTI subscriber with the marker's callback on is there throughout, as in a detrace recording.
// Activity buffers are handled as detrace handles them: a pool of 1 MiB buffers handed over
// already zero (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER; --cleared lets CUPTI clear them on
// the launching thread), cleared again on CUPTI's thread after use, and a thread that calls
// cuptiActivityFlushAll every 100 ms.
//
// Prints, per part, the median time per call on each side and the median and quartiles of the
// per-block paired differences, and checks that the records counted match what was launched
// (exit status 1 if not). Both contexts pay for CUPTI being loaded and subscribed, so the records'
// figure is what a kernel record adds to a launch; a control pass with records on neither context
// first shows what the two contexts differ by on their own.
// Usage: cupti_record_cost [--blocks N] [--launches N] [--cleared] [--toggle]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include "paired_blocks.h"

namespace {

using detrace::bench::alternate;
using detrace::bench::kWarmupPairs;
using detrace::bench::report;

__global__ void emptyKernel() {}

// The digest launch's parameters: kernels::detail::DigestBatch of kMaxBatch (8) entries is 800
// bytes.
struct BigParams {
  uint64_t words[100];
};
__global__ void bigParamKernel(BigParams) {}
__global__ void smallParamKernel(uint64_t) {}

constexpr size_t kBufferBytes = size_t{1} << 20;
constexpr int kPoolBuffers = 16;

bool g_zeroed = true;
std::mutex g_pool_mu;
std::vector<uint8_t*> g_pool;
std::atomic<uint32_t> g_recorded_context{0};
std::atomic<long long> g_records_recorded{0}, g_records_other{0}, g_markers{0};

[[noreturn]] void die(const char* call, const char* why) {
  std::fprintf(stderr, "cupti_record_cost: %s failed: %s\n", call, why != nullptr ? why : "?");
  std::exit(1);
}
const char* cuError(CUresult r) {
  const char* s = nullptr;
  cuGetErrorString(r, &s);
  return s;
}
const char* cuptiError(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s;
}
#define CHECK_CU(call)                               \
  do {                                               \
    const CUresult r_ = (call);                      \
    if (r_ != CUDA_SUCCESS) die(#call, cuError(r_)); \
  } while (0)
#define CHECK_CUPTI(call)                                \
  do {                                                   \
    const CUptiResult r_ = (call);                       \
    if (r_ != CUPTI_SUCCESS) die(#call, cuptiError(r_)); \
  } while (0)

uint8_t* newBuffer() {
  void* p = std::aligned_alloc(8, kBufferBytes);
  if (p != nullptr) std::memset(p, 0, kBufferBytes);
  return static_cast<uint8_t*>(p);
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  {
    std::lock_guard lk(g_pool_mu);
    if (!g_pool.empty()) {
      *buffer = g_pool.back();
      g_pool.pop_back();
      *size = kBufferBytes;
      return;
    }
  }
  *buffer = newBuffer();
  *size = *buffer != nullptr ? kBufferBytes : 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    (k->contextId == g_recorded_context.load() ? g_records_recorded : g_records_other)++;
  }
  if (buffer == nullptr) return;
  if (g_zeroed) std::memset(buffer, 0, kBufferBytes);
  std::lock_guard lk(g_pool_mu);
  g_pool.push_back(buffer);
}

void CUPTIAPI onMarker(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) g_markers.fetch_add(1, std::memory_order_relaxed);
}

// Calls 100 ms apart, as detrace's flusher does, until stopped.
class Flusher {
 public:
  Flusher() : thread_([this] { run(); }) {}
  ~Flusher() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void run() {
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(100), [this] { return stop_; })) {
      lk.unlock();
      cuptiActivityFlushAll(0);
      lk.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Nanoseconds per launch of one block of `n` launches on the current context (launches only).
double launchBlock(int n) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) emptyKernel<<<1, 32>>>();
  const double s = secondsSince(t0);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    die("emptyKernel<<<1, 32>>>", cudaGetErrorString(e));
  }
  CHECK_CU(cuCtxSynchronize());
  return s * 1e9 / n;
}

double markerBlock(int n) {
  const auto t0 = std::chrono::steady_clock::now();
  int version = 0;
  for (int i = 0; i < n; ++i) (void)cuDriverGetVersion(&version);
  return secondsSince(t0) * 1e9 / n;
}

struct Options {
  int blocks = 2000;
  int launches = 256;
  bool toggle = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--blocks" && i + 1 < argc) {
      o.blocks = std::atoi(argv[++i]);
    } else if (a == "--launches" && i + 1 < argc) {
      o.launches = std::atoi(argv[++i]);
    } else if (a == "--cleared") {
      g_zeroed = false;
    } else if (a == "--toggle") {
      o.toggle = true;
    } else {
      std::fprintf(stderr,
                   "usage: cupti_record_cost [--blocks N] [--launches N] [--cleared] [--toggle]\n"
                   "  --blocks N    block pairs per part (default 2000)\n"
                   "  --launches N  calls per block (default 256)\n"
                   "  --cleared     let CUPTI clear its buffers on the launching thread\n"
                   "  --toggle      enable and disable records process-wide between blocks\n"
                   "                instead of keeping them on one of two contexts\n");
      std::exit(2);
    }
  }
  if (o.blocks < 1 || o.launches < 1) {
    std::fprintf(stderr, "cupti_record_cost: --blocks and --launches must be positive\n");
    std::exit(2);
  }
  return o;
}

void setupActivity() {
  if (g_zeroed) {
    uint8_t one = 1;
    size_t size = sizeof one;
    CHECK_CUPTI(
        cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &size, &one));
  }
  for (int i = 0; i < kPoolBuffers; ++i) {
    if (uint8_t* b = newBuffer()) g_pool.push_back(b);
  }
  CHECK_CUPTI(cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted));
}

// Blocks alternating between the context with records and the one without (or, toggling, one
// context with records switched on and off), which side goes first alternating too. Per context,
// a control pass with records on neither context comes first: what the two contexts differ by on
// their own. Returns false if the records counted do not match the launches.
bool measureRecords(const Options& o, CUcontext recorded, CUcontext other) {
  bool per_context = !o.toggle;
  auto side = [&](bool with) {
    if (per_context) {
      CHECK_CU(cuCtxSetCurrent(with ? recorded : other));
    } else {
      CHECK_CU(cuCtxSetCurrent(recorded));
      CHECK_CUPTI(with ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                       : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    }
    return launchBlock(o.launches);
  };
  if (per_context) {
    std::vector<double> a, b;
    alternate(o.blocks, side, a, b);
    report("control (records on neither context)", "first context", "second", a, b);
    const CUptiResult r =
        cuptiActivityEnableContext(recorded, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) {
      const char* why = cuptiError(r);
      std::printf(
          "records: cuptiActivityEnableContext refused (%s): toggling process-wide instead\n",
          why != nullptr ? why : "?");
      per_context = false;
    }
  }
  std::vector<double> on, off;
  {
    Flusher flusher;  // stopped before the count: no buffer is being read when it is taken
    alternate(o.blocks, side, on, off);
  }
  CHECK_CU(cuCtxSetCurrent(recorded));
  CHECK_CUPTI(per_context
                  ? cuptiActivityDisableContext(recorded, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                  : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CHECK_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  size_t dropped = 0;
  (void)cuptiActivityGetNumDroppedRecords(recorded, 0, &dropped);
  report(per_context ? "records (two contexts)" : "records (toggled)", "with records", "without",
         on, off);
  const long long launched = static_cast<long long>(o.blocks + kWarmupPairs) * o.launches;
  const bool ok =
      !per_context || (g_records_recorded.load() == launched && g_records_other.load() == 0);
  std::printf(
      "records: %lld kernel records from the recorded side's %lld launches, %lld from the other "
      "side, %zu dropped by CUPTI: %s\n",
      g_records_recorded.load(), launched, g_records_other.load(), dropped,
      !per_context ? "toggling runs both sides in one context, so the count is only for reference"
      : ok         ? "as expected"
                   : "MISMATCH (expected all and none)");
  return ok;
}

void enableMarker(CUpti_SubscriberHandle sub, bool on) {
  CHECK_CUPTI(cuptiEnableCallback(on ? 1 : 0, sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                  CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion));
}

// Returns false if a call with the callback on was not seen by it.
bool measureMarker(const Options& o, CUpti_SubscriberHandle sub) {
  auto side = [&](bool with) {
    enableMarker(sub, with);
    return markerBlock(o.launches);
  };
  std::vector<double> on, off;
  long long before = 0;
  alternate(o.blocks, side, on, off, [&] { before = g_markers.load(); });
  report("marker (cuDriverGetVersion)", "with its callback", "without", on, off);
  const long long seen = g_markers.load() - before;
  const long long expected = static_cast<long long>(o.blocks) * o.launches;
  std::printf("marker: %lld callbacks for %lld calls with the callback on: %s\n", seen, expected,
              seen == expected ? "as expected" : "MISMATCH");
  return seen == expected;
}

// Nanoseconds per cuLaunchKernel of `f` with the one argument `arg`, over a block of `n`.
double driverLaunchBlock(CUfunction f, void* arg, int n) {
  void* args[] = {arg};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i)
    CHECK_CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  const double s = secondsSince(t0);
  CHECK_CU(cuCtxSynchronize());
  return s * 1e9 / n;
}

// What 800 bytes of kernel parameters cost a driver-API launch against 8 bytes (records off).
void measureParams(const Options& o, CUcontext ctx) {
  CHECK_CU(cuCtxSetCurrent(ctx));
  cudaFunction_t big = nullptr, small = nullptr;
  if (const cudaError_t e =
          cudaGetFuncBySymbol(&big, reinterpret_cast<const void*>(bigParamKernel));
      e != cudaSuccess) {
    die("cudaGetFuncBySymbol(bigParamKernel)", cudaGetErrorString(e));
  }
  if (const cudaError_t e =
          cudaGetFuncBySymbol(&small, reinterpret_cast<const void*>(smallParamKernel));
      e != cudaSuccess) {
    die("cudaGetFuncBySymbol(smallParamKernel)", cudaGetErrorString(e));
  }
  BigParams params{};
  uint64_t word = 0;
  auto side = [&](bool with) {
    return with ? driverLaunchBlock(reinterpret_cast<CUfunction>(big), &params, o.launches)
                : driverLaunchBlock(reinterpret_cast<CUfunction>(small), &word, o.launches);
  };
  std::vector<double> on, off;
  alternate(o.blocks, side, on, off);
  report("params (driver launches, records off)", "with 800 bytes", "with 8 bytes", on, off);
}

// What the marker's callback being on costs a launch that never calls it (records off). Leaves
// the callback on.
void measureIntercept(const Options& o, CUpti_SubscriberHandle sub, CUcontext ctx) {
  CHECK_CU(cuCtxSetCurrent(ctx));
  auto side = [&](bool with) {
    enableMarker(sub, with);
    return launchBlock(o.launches);
  };
  std::vector<double> on, off;
  alternate(o.blocks, side, on, off);
  enableMarker(sub, true);
  report("intercept (launches, records off)", "with the marker's callback on", "off", on, off);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  CHECK_CU(cuInit(0));
  CUdevice dev = 0;
  CHECK_CU(cuDeviceGet(&dev, 0));
  setupActivity();
  // A subscriber with the marker's callback on, as detrace keeps during a recording (the launches
  // never call it).
  CUpti_SubscriberHandle sub = nullptr;
  CHECK_CUPTI(cuptiSubscribe(&sub, onMarker, nullptr));
  enableMarker(sub, true);
  CUcontext recorded = nullptr, other = nullptr;
  CHECK_CU(cuCtxCreate(&recorded, nullptr, 0, dev));  // CUDA 13's cuCtxCreate (v4)
  CHECK_CU(cuCtxCreate(&other, nullptr, 0, dev));
  uint32_t id = 0;
  CHECK_CUPTI(cuptiGetContextId(recorded, &id));
  g_recorded_context = id;
  std::printf("cupti_record_cost: %d block pairs of %d calls, buffers %s\n", o.blocks, o.launches,
              g_zeroed ? "handed over zeroed" : "cleared by CUPTI");
  const bool records_ok = measureRecords(o, recorded, other);
  const bool marker_ok = measureMarker(o, sub);
  measureIntercept(o, sub, other);
  measureParams(o, other);
  CHECK_CUPTI(cuptiUnsubscribe(sub));
  CHECK_CU(cuCtxDestroy(other));
  CHECK_CU(cuCtxDestroy(recorded));
  return records_ok && marker_ok ? 0 : 1;
}
