// cupti_teardown_probe: while CUPTI's CONTEXT_DESTROY_STARTING callback runs on the thread that
// destroys a context, can another thread call the CUDA driver, on that context and on another?
//
// The question behind Fingerprinter::forgetContext (tracer/src/fingerprinter.cc): it runs in that
// callback and waits, without a bound, for the tracer's drainer thread, which may be inside
// cuCtxSetCurrent or cuEventQuery on the dying context. If the driver made those calls wait for
// the teardown to finish, the two threads would wait for each other and the program would hang
// in its cudaDeviceReset or cuCtxDestroy.
//
//   cupti_teardown_probe [reset|destroy]
//     reset (default): the runtime's primary context, torn down by cudaDeviceReset
//     destroy:         a context of its own (cuCtxCreate), torn down by cuCtxDestroy
//
// Inside the callback a helper thread makes, one after another, the calls below; the callback
// waits for all of them, at most 5 s, then returns. For each call it prints its result and when
// it returned, in ms after the callback began, and whether that was inside the callback. Exit
// status 0 when every call returned inside the callback, 3 when one waited for the teardown, 1
// when the setup failed.
#include <cuda.h>
#include <cupti.h>

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

namespace {

#define PROBE_CHECK(call)                                                                   \
  do {                                                                                      \
    if (!(call)) {                                                                          \
      std::fprintf(stderr, "cupti_teardown_probe: %s failed (line %d)\n", #call, __LINE__); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

using Clock = std::chrono::steady_clock;

struct Step {
  std::string what;
  CUresult result = CUDA_SUCCESS;
  double ms = -1;  // after the callback began
  bool inside = false;
};

// What the helper thread touches: the dying context (`dying`, its stream and an event recorded
// on it) and another context (`other`, with its own stream and event).
struct Targets {
  CUcontext dying = nullptr, other = nullptr;
  CUstream dying_stream = nullptr, other_stream = nullptr;
  CUevent dying_event = nullptr, other_event = nullptr;
};

Targets g_targets;
std::mutex g_mu;
std::condition_variable g_cv;
bool g_go = false, g_done = false;
std::atomic<bool> g_in_callback{false};
Clock::time_point g_callback_begin;
std::vector<Step> g_steps;
int g_callbacks = 0;

void record(const char* what, CUresult r) {
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - g_callback_begin).count();
  std::lock_guard lk(g_mu);
  g_steps.push_back({what, r, ms, g_in_callback.load()});
}

// The tracer's drainer's calls (cuCtxSetCurrent, cuEventQuery on the dying context), then what a
// program thread does on another context (allocate, launch work, wait for it) and the pinned
// allocation a first fingerprint makes.
void helper() {
  {
    std::unique_lock lk(g_mu);
    g_cv.wait(lk, [] { return g_go; });
  }
  const Targets& t = g_targets;
  record("cuCtxSetCurrent(dying)", cuCtxSetCurrent(t.dying));
  record("cuEventQuery(event of dying)", cuEventQuery(t.dying_event));
  record("cuCtxSetCurrent(other)", cuCtxSetCurrent(t.other));
  record("cuEventQuery(event of other)", cuEventQuery(t.other_event));
  CUdeviceptr p = 0;
  record("cuMemAlloc(1 MiB) in other", cuMemAlloc(&p, 1 << 20));
  record("cuMemsetD8Async in other", p != 0 ? cuMemsetD8Async(p, 0, 1 << 20, t.other_stream) : CUDA_ERROR_INVALID_VALUE);
  record("cuEventRecord in other", cuEventRecord(t.other_event, t.other_stream));
  record("cuStreamSynchronize in other", cuStreamSynchronize(t.other_stream));
  void* host = nullptr;
  record("cuMemHostAlloc(64 KiB, DEVICEMAP) in other", cuMemHostAlloc(&host, 1 << 16, CU_MEMHOSTALLOC_DEVICEMAP));
  if (p != 0) (void)cuMemFree(p);
  if (host != nullptr) (void)cuMemFreeHost(host);
  std::lock_guard lk(g_mu);
  g_done = true;
  g_cv.notify_all();
}

void CUPTIAPI onCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  if (rd->context != g_targets.dying) return;
  ++g_callbacks;
  g_callback_begin = Clock::now();
  g_in_callback.store(true);
  std::unique_lock lk(g_mu);
  g_go = true;
  g_cv.notify_all();
  const bool finished = g_cv.wait_for(lk, std::chrono::seconds(5), [] { return g_done; });
  g_in_callback.store(false);
  std::printf("callback: %s after %.1f ms\n", finished ? "the helper's calls all returned" : "gave up waiting",
              std::chrono::duration<double, std::milli>(Clock::now() - g_callback_begin).count());
}

CUevent recordedEvent(CUstream s) {
  CUevent e = nullptr;
  PROBE_CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  PROBE_CHECK(cuEventRecord(e, s) == CUDA_SUCCESS);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  const bool reset = argc < 2 || std::strcmp(argv[1], "destroy") != 0;
  PROBE_CHECK(cuInit(0) == CUDA_SUCCESS);
  CUdevice dev = 0;
  PROBE_CHECK(cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  CUpti_SubscriberHandle sub = nullptr;
  PROBE_CHECK(cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(onCallback), nullptr) == CUPTI_SUCCESS);
  PROBE_CHECK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) ==
              CUPTI_SUCCESS);

  Targets& t = g_targets;
  PROBE_CHECK(cuCtxCreate(&t.other, nullptr, 0, dev) == CUDA_SUCCESS);  // current on this thread
  PROBE_CHECK(cuStreamCreate(&t.other_stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  t.other_event = recordedEvent(t.other_stream);
  if (reset) {
    PROBE_CHECK(cuDevicePrimaryCtxRetain(&t.dying, dev) == CUDA_SUCCESS);
  } else {
    PROBE_CHECK(cuCtxCreate(&t.dying, nullptr, 0, dev) == CUDA_SUCCESS);
  }
  PROBE_CHECK(cuCtxSetCurrent(t.dying) == CUDA_SUCCESS);
  PROBE_CHECK(cuStreamCreate(&t.dying_stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  t.dying_event = recordedEvent(t.dying_stream);
  PROBE_CHECK(cuCtxSynchronize() == CUDA_SUCCESS);

  std::thread h(helper);
  const Clock::time_point t0 = Clock::now();
  CUresult teardown = CUDA_SUCCESS;
  if (reset) {
    teardown = cuDevicePrimaryCtxReset(dev);  // what cudaDeviceReset does to the primary context
  } else {
    teardown = cuCtxDestroy(t.dying);
  }
  const double teardown_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  h.join();
  std::printf("mode %s: %s returned %d after %.1f ms; CONTEXT_DESTROY_STARTING callbacks: %d\n",
              reset ? "reset" : "destroy", reset ? "cuDevicePrimaryCtxReset" : "cuCtxDestroy",
              static_cast<int>(teardown), teardown_ms, g_callbacks);
  bool waited = false;
  for (const Step& s : g_steps) {
    const char* name = nullptr;
    (void)cuGetErrorName(s.result, &name);
    std::printf("  %-44s %-28s returned %8.2f ms after the callback began, %s\n", s.what.c_str(),
                name != nullptr ? name : "?", s.ms, s.inside ? "inside it" : "AFTER it returned");
    waited = waited || !s.inside;
  }
  if (g_callbacks == 0) {
    std::printf("verdict: no CONTEXT_DESTROY_STARTING callback came for the context\n");
    return 1;
  }
  std::printf("verdict: %s\n", waited ? "a call waited for the teardown's callback to return"
                                      : "every call returned inside the teardown's callback");
  return waited ? 3 : 0;
}
