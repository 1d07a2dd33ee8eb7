// libdetrace_cupti_floor.so: the least a CUPTI-based recorder can cost, for bench_overhead --floor.
//
// Loaded instead of detrace through CUDA_INJECTION64_PATH, it does only what CUPTI itself charges
// for and nothing of detrace's (no slots, names, streams, writer, file): DETRACE_FLOOR names the
// pieces, comma-separated:
//   subscribe  cuptiSubscribe with no callback enabled (what a paused tracer keeps);
//   records    kernel activity records (CONCURRENT_KERNEL), counted and discarded;
//   callbacks  empty API-enter/exit callbacks on the runtime and driver launch functions
//              (detrace's --capture meta takes the same eight + eight);
//   driver     empty callbacks on the driver launch functions only;
//   graph      empty callbacks on the graph launch functions only (runtime and driver);
//   marker     a callback on cuDriverGetVersion only (what a recorder placing library calls among
//              kernel records by a marker call's correlation id would keep on; the program never
//              calls it, so this measures the cost of the callback being on for other calls);
//   latency    kernel records with their queued/submitted timestamps
//              (cuptiActivityEnableLatencyTimestamps), which an activity-records-only recorder
//              needs to place kernels among library calls (implies records).
// Activity attributes, to find which of CUPTI's settings move the records' cost (each implies
// records):
//   zeroed     CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER = 1: buffers handed to CUPTI are
//              already zero (cleared on CUPTI's thread after use), so CUPTI does not clear them
//              on the launching thread;
//   pinned     CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED = 1: timestamps in pinned host
//              memory instead of device memory;
//   bigbuf     8 MiB activity buffers instead of 1 MiB;
//   devbuf     CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE 32 MB instead of CUPTI's 3.2 MB;
//   shared     CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER = 0 (one buffer for all threads).
// "records" and "callbacks" subscribe too. With records, detrace_floor_records(0 or 1), exported,
// turns the kernel records off and on again (overhead_workload.py --paired floor calls it through
// ctypes between two steps of a loop); it returns 0, or CUPTI's error. At exit it prints, to
// stderr, the records and callbacks it saw (records: those in buffers completed by then), so a
// run can be checked to have traced what it claims.
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "launch_callback_ids.h"  // tracer/src: the same callbacks as detrace

namespace {

size_t g_buffer_bytes = size_t{1} << 20;
bool g_zeroed = false;

std::atomic<long long> g_records{0};
std::atomic<long long> g_callbacks{0};
std::atomic<long long> g_dropped{0};
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_records_configured = false;  // buffer callbacks registered: detrace_floor_records may switch
std::mutex g_pool_mu;
std::vector<uint8_t*> g_pool;

bool has(const std::string& list, const char* piece) {
  std::string padded = "," + list + ",";
  return padded.find(std::string(",") + piece + ",") != std::string::npos;
}

void CUPTIAPI onCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  std::lock_guard lk(g_pool_mu);
  *max_records = 0;
  if (g_pool.empty()) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, g_buffer_bytes));
    if (*buffer != nullptr && g_zeroed) std::memset(*buffer, 0, g_buffer_bytes);
  } else {
    *buffer = g_pool.back();
    g_pool.pop_back();
  }
  *size = *buffer != nullptr ? g_buffer_bytes : 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  long long n = 0;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) ++n;
  g_records.fetch_add(n, std::memory_order_relaxed);
  if (g_zeroed) std::memset(buffer, 0, g_buffer_bytes);  // on CUPTI's thread, not the program's
  std::lock_guard lk(g_pool_mu);
  g_pool.push_back(buffer);
}

// Records in buffers CUPTI has handed back so far (no flush at exit: a bench helper has no business
// risking a hang there), and callbacks.
void report() {
  if (g_subscriber == nullptr) return;
  std::fprintf(stderr, "cupti_floor: %lld kernel records, %lld callbacks\n", g_records.load(),
               g_callbacks.load());
}

void enableLaunchCallbacks(bool runtime) {
  using detrace::tracer::kDriverLaunchCallbacks;
  using detrace::tracer::kRuntimeLaunchCallbacks;
  if (runtime) {
    for (CUpti_CallbackId id : kRuntimeLaunchCallbacks) cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
  }
  for (CUpti_CallbackId id : kDriverLaunchCallbacks) cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
}

void setAttribute(CUpti_ActivityAttribute attr, const char* what, auto value) {
  size_t size = sizeof(value);
  if (cuptiActivitySetAttribute(attr, &size, &value) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_floor: setting %s failed\n", what);
  }
}

// Before the buffer callbacks are registered and any kind enabled, as CUPTI asks for all five.
void setAttributes(bool zeroed, bool pinned, bool bigbuf, bool devbuf, bool shared) {
  if (bigbuf) g_buffer_bytes = size_t{8} << 20;
  g_zeroed = zeroed;
  if (zeroed) setAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, "zeroed", uint8_t{1});
  if (pinned) setAttribute(CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, "pinned", uint8_t{1});
  if (devbuf) setAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, "devbuf", size_t{32000000});
  if (shared) setAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, "shared", uint8_t{0});
}

}  // namespace

// Kernel records off (0) or on again (1), from the program's thread between its steps.
extern "C" __attribute__((visibility("default"))) int detrace_floor_records(int on) {
  if (!g_records_configured) return static_cast<int>(CUPTI_ERROR_NOT_INITIALIZED);
  return static_cast<int>(on != 0 ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                                  : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
}

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  const char* v = std::getenv("DETRACE_FLOOR");
  const std::string pieces = v != nullptr ? v : "";
  const bool latency = has(pieces, "latency");
  const bool zeroed = has(pieces, "zeroed");
  const bool pinned = has(pieces, "pinned");
  const bool bigbuf = has(pieces, "bigbuf");
  const bool devbuf = has(pieces, "devbuf");
  const bool shared = has(pieces, "shared");
  const bool records = has(pieces, "records") || latency || zeroed || pinned || bigbuf || devbuf || shared;
  const bool callbacks = has(pieces, "callbacks");
  const bool driver = has(pieces, "driver");
  const bool graph = has(pieces, "graph");
  const bool marker = has(pieces, "marker");
  if (!records && !callbacks && !driver && !graph && !marker && !has(pieces, "subscribe")) return 1;
  if (cuptiSubscribe(&g_subscriber, onCallback, nullptr) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_floor: cuptiSubscribe failed\n");
    g_subscriber = nullptr;
    return 1;
  }
  if (callbacks || driver) enableLaunchCallbacks(callbacks);
  if (marker) cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion);
  if (graph) {
    for (CUpti_CallbackId id : {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000}) {
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    }
    for (CUpti_CallbackId id : {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz}) {
      cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id);
    }
  }
  if (records) {
    setAttributes(zeroed, pinned, bigbuf, devbuf, shared);
    g_records_configured =
        cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) == CUPTI_SUCCESS;
    if (latency && cuptiActivityEnableLatencyTimestamps(1) != CUPTI_SUCCESS) {
      std::fprintf(stderr, "cupti_floor: cuptiActivityEnableLatencyTimestamps failed\n");
    }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
  std::atexit(report);
  return 1;
}
