// The CUPTI callback ids of the kernel-launch entry points detrace follows: the runtime's and the
// driver's, each with its per-thread-default-stream (_ptsz) twin. Shared by the tracer's launch
// callbacks (cupti_adapter.cc) and the CUPTI-only overhead floor (bench/tracer/cupti_floor.cc),
// so both measure the same callbacks.
#pragma once

#include <cupti.h>

namespace detrace::tracer {

inline constexpr CUpti_CallbackId kRuntimeLaunchCallbacks[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000};

inline constexpr CUpti_CallbackId kDriverLaunchCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz};

// The graph launch entry points among them (callback ids are numbered per domain).
constexpr bool isGraphLaunchCallback(CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    return id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
           id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000;
  }
  return domain == CUPTI_CB_DOMAIN_DRIVER_API &&
         (id == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || id == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz);
}

}  // namespace detrace::tracer
