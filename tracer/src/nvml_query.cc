#include "nvml_query.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "session.h"
#include "signals.h"

namespace detrace::tracer {
namespace {

constexpr auto kFinishWait = std::chrono::seconds(1);

// One per process; leaked (the detached thread may outlive every wait for it).
struct NvmlAsk {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};
std::atomic<NvmlAsk*> g_ask{nullptr};
std::atomic<bool> g_asked{false};     // askNvmlForDriverVersion ran in this process
std::atomic<bool> g_in_nvml{false};   // the thread is inside NVML now
std::atomic<bool> g_unusable{false};  // forked while the parent was inside NVML

void ask(NvmlAsk* a) noexcept {
  g_in_nvml.store(true, std::memory_order_release);
  Session::get().noteDriverVersion();
  g_in_nvml.store(false, std::memory_order_release);
  std::lock_guard lk(a->mu);
  a->done = true;
  a->cv.notify_all();
}

}  // namespace

void askNvmlForDriverVersion() noexcept {
  if (g_unusable.load(std::memory_order_acquire) || g_asked.exchange(true)) return;
  try {
    auto* a = new NvmlAsk();
    {
      SignalsBlockedScope blocked;  // the program's signals stay with the program's threads
      std::thread(ask, a).detach();
    }
    g_ask.store(a, std::memory_order_release);
  } catch (...) {  // no thread: the trace goes without the driver's version
  }
}

void waitForNvml() noexcept {
  try {
    NvmlAsk* a = g_ask.exchange(nullptr, std::memory_order_acq_rel);
    if (a == nullptr) return;
    std::unique_lock lk(a->mu);
    a->cv.wait_for(lk, kFinishWait, [a] { return a->done; });
  } catch (...) {
  }
}

void resetNvmlAfterFork() noexcept {
  g_ask.store(nullptr, std::memory_order_relaxed);  // the parent's: its mutex may be held
  g_asked.store(false, std::memory_order_relaxed);
  if (g_in_nvml.load(std::memory_order_acquire)) g_unusable.store(true, std::memory_order_relaxed);
}

}  // namespace detrace::tracer
