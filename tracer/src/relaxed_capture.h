// RelaxedCaptureScope: the calling thread's CUDA stream-capture mode set to relaxed for a scope,
// and given back. In the default (global) mode an "unsafe" call such as cuEventQuery or a
// synchronising memset from any thread invalidates a graph that another thread of the program is
// capturing; the relaxed mode exempts this thread's calls (the tracer's never touch the capturing
// stream). The mode is given back because the thread may be the program's own.
#pragma once

#include <cuda.h>

#include "next_symbol.h"

namespace detrace::tracer {

class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() {
    if (auto exchange = exchangeFn()) active_ = exchange(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureScope() {
    if (active_) exchangeFn()(&mode_);
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  using Exchange = CUresult (*)(CUstreamCaptureMode*);
  static Exchange exchangeFn() {
    static const auto fn =
        reinterpret_cast<Exchange>(loadedSymbol("cuThreadExchangeStreamCaptureMode", "libcuda.so"));
    return fn;
  }

  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool active_ = false;
};

}  // namespace detrace::tracer
