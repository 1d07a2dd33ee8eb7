// Checking macro for the CUDA runtime API (the replay-side kernels: reduce.cu, rmsnorm.cu): turns a
// failed call into a detrace::Status naming the call and the runtime's error, e.g.
// "cudaMemsetAsync(...) failed: cudaErrorInvalidValue (invalid argument)". The driver API used by
// the digest has its own macro in driver_api.h.
#pragma once

#include <cuda_runtime_api.h>

#include "detrace/base/status.h"

namespace detrace::kernels::detail {

inline Status runtimeError(cudaError_t e, const char* call) {
  const ErrorCode code = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                             ? ErrorCode::kUnavailable
                             : (e == cudaErrorInvalidValue ? ErrorCode::kInvalidArgument
                                                           : ErrorCode::kInternal);
  return makeError(code, "{} failed: {} ({})", call, cudaGetErrorName(e), cudaGetErrorString(e));
}

}  // namespace detrace::kernels::detail

#define DETRACE_CUDA_RETURN_IF_ERROR(call)                                     \
  do {                                                                         \
    const cudaError_t detrace_rt_ = (call);                                    \
    if (detrace_rt_ != cudaSuccess)                                            \
      return ::detrace::kernels::detail::runtimeError(detrace_rt_, #call);     \
  } while (0)
