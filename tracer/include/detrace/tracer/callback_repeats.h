// A CUPTI API callback delivered twice. Seen on an H100 (CUDA 13.0, driver 580): after
// `attach start` re-enabled the runtime's cudaGraphLaunch callbacks while the program's threads
// were launching, every callback of that kind came twice in a row (the same thread, site and
// correlation id) until the next stop turned it off; about one start in six under a loaded CPU.
// Taken as two launches, each graph launch was recorded twice and the first copy's fingerprints
// were lost. One API call's enter or exit comes once per thread, and a correlation id comes back
// only after 2^32 calls (correlation_ids.h), so a callback equal to the thread's previous one is
// that repeat. "Previous" counts the program's callbacks only: those of the calls the tracer makes
// inside a callback (its digest launches, its memsets) come between the two copies and must not
// be shown to the filter (cupti_adapter.cc passes only callbacks that are not nested in another).
// Plain logic over standard types, so that CPU tests can check it.
#pragma once

#include <cstdint>

namespace detrace::tracer {

class CallbackRepeats {
 public:
  // A callback begins on this thread (`api`: a runtime or driver API callback; other domains are
  // never repeats). True if it is a repeat, to be ignored; otherwise end() must follow when its
  // handling returns. A callback that begins while another is handled (the tracer's own call
  // inside it) is neither checked nor remembered.
  bool begin(bool api, uint32_t domain, uint32_t cbid, uint32_t site, uint32_t correlation) {
    if (depth_++ > 0 || !api) return false;
    if (repeated(domain, cbid, site, correlation)) {
      --depth_;
      return true;
    }
    return false;
  }
  void end() {
    if (depth_ > 0) --depth_;
  }

  // True if this callback is the same as the last one this filter saw (then it is to be ignored).
  // A callback without a correlation id (0) cannot be told from another call's: never a repeat.
  bool repeated(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t correlation) {
    if (correlation == 0) {
      seen_ = false;
      return false;
    }
    const Key key{domain, cbid, site, correlation};
    if (seen_ && key == last_) return true;
    last_ = key;
    seen_ = true;
    return false;
  }

 private:
  struct Key {
    uint32_t domain = 0, cbid = 0, site = 0, correlation = 0;
    bool operator==(const Key&) const = default;
  };
  Key last_;
  bool seen_ = false;
  int depth_ = 0;  // callbacks of this thread being handled
};

}  // namespace detrace::tracer
