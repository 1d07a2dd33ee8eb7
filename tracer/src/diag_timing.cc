// Overhead diagnostics: see diag_timing.h.
#include "diag_timing.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "detrace/db/writer.h"

namespace detrace::tracer {
namespace {

constexpr int kSites = static_cast<int>(DiagSite::kCount);
std::atomic<int64_t> g_ns[kSites];
std::atomic<int64_t> g_calls[kSites];
std::atomic<int64_t> g_max[kSites];   // the longest single call
std::atomic<int64_t> g_slow[kSites];  // calls of kSlowNs or more: stalls, not steady cost
constexpr int64_t kSlowNs = 100'000;

const char* siteName(int site) {
  switch (static_cast<DiagSite>(site)) {
    case DiagSite::kLaunchEnter: return "launch_enter";
    case DiagSite::kLaunchExit: return "launch_exit";
    case DiagSite::kNestedDriver: return "nested_driver";
    case DiagSite::kCaptureCheck: return "capture_check";
    case DiagSite::kEnterClock: return "enter_clock";
    case DiagSite::kEnterStream: return "enter_stream";
    case DiagSite::kEnterName: return "enter_name";
    case DiagSite::kEnterSlot: return "enter_slot";
    case DiagSite::kOtherCallback: return "other_callback";
    case DiagSite::kLibraryOp: return "library_op";
    case DiagSite::kOpFill: return "op_fill";
    case DiagSite::kOpStream: return "op_stream";
    case DiagSite::kOpPublish: return "op_publish";
    case DiagSite::kFingerprint: return "fingerprint";
    case DiagSite::kFingerprintLock: return "fingerprint_lock";
    case DiagSite::kFingerprintCheck: return "fingerprint_check";
    case DiagSite::kDigestLaunch: return "digest_launch";
    case DiagSite::kFingerprintEvent: return "fingerprint_event";
    case DiagSite::kActivityBuffer: return "activity_buffer";
    case DiagSite::kFingerprintPoll: return "fingerprint_poll";
    case DiagSite::kMarker: return "marker";
    case DiagSite::kGemmWrapper: return "gemm_wrapper";
    case DiagSite::kGemmCall: return "gemm_call";
    case DiagSite::kGemmGap: return "gemm_gap";
    case DiagSite::kGemmWrapperPaused: return "gemm_wrapper_paused";
    case DiagSite::kGemmCallPaused: return "gemm_call_paused";
    case DiagSite::kGemmGapPaused: return "gemm_gap_paused";
    case DiagSite::kPeriodicFlush: return "periodic_flush";
    case DiagSite::kCount: break;
  }
  return "unknown";
}

}  // namespace

namespace detail {
// Read at load, before CUPTI can call back, so that a scope's check is one load and a branch.
const bool g_diag_timing = [] {
  const char* v = std::getenv("DETRACE_DIAG_TIMING");
  return v != nullptr && std::strcmp(v, "1") == 0;
}();
}  // namespace detail

int64_t diagNowNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void diagAdd(DiagSite site, int64_t ns) {
  const int i = static_cast<int>(site);
  if (i < 0 || i >= kSites) return;
  g_ns[i].fetch_add(ns, std::memory_order_relaxed);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
  if (ns >= kSlowNs) g_slow[i].fetch_add(1, std::memory_order_relaxed);
  int64_t seen = g_max[i].load(std::memory_order_relaxed);
  while (ns > seen && !g_max[i].compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

void diagWriteStats(db::TraceWriter& w) {
  if (!diagTimingOn()) return;
  for (int i = 0; i < kSites; ++i) {
    const int64_t calls = g_calls[i].exchange(0, std::memory_order_relaxed);
    const int64_t ns = g_ns[i].exchange(0, std::memory_order_relaxed);
    const int64_t max_ns = g_max[i].exchange(0, std::memory_order_relaxed);
    const int64_t slow = g_slow[i].exchange(0, std::memory_order_relaxed);
    if (calls == 0) continue;
    const std::string site = std::string("diag_") + siteName(i);
    w.addStat(site + "_ns", ns);
    w.addStat(site + "_calls", calls);
    w.addStat(site + "_max_ns", max_ns);
    w.addStat(site + "_slow", slow);
  }
}

}  // namespace detrace::tracer
