// The CUDA driver API entry points the digest uses, resolved at run time from libcuda.so.1
// (dlopen + cuGetProcAddress) instead of linking libcuda. Two reasons: detrace_kernels must load
// on machines without a GPU driver (CI; the CPU twins), and inside a traced process the library
// must bind to the driver the process already loaded, at a fixed ABI version, without touching
// the process's CUDA runtime.
#pragma once

#include <cuda.h>

#include "detrace/base/status.h"

namespace detrace::kernels::detail {

struct DriverApi {
  decltype(&::cuInit) Init;
  decltype(&::cuGetErrorName) GetErrorName;
  decltype(&::cuGetErrorString) GetErrorString;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent;
  decltype(&::cuCtxGetDevice) CtxGetDevice;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleUnload) ModuleUnload;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute;
  decltype(&::cuOccupancyMaxActiveBlocksPerMultiprocessor) OccupancyMaxActiveBlocksPerMultiprocessor;
  decltype(&::cuLaunchKernel) LaunchKernel;
};

// The entry points, resolved once per process (thread-safe); kUnavailable without a driver.
Result<const DriverApi*> driverApi();

// A Status naming the failed call and the driver's error name and text.
Status driverError(const DriverApi& api, CUresult r, const char* call);

}  // namespace detrace::kernels::detail

// Calls api.fn(args...) and returns a Status naming the call when it fails.
#define DETRACE_CU_RETURN_IF_ERROR(api, call)                                  \
  do {                                                                         \
    const CUresult detrace_cu_ = (api).call;                                   \
    if (detrace_cu_ != CUDA_SUCCESS)                                           \
      return ::detrace::kernels::detail::driverError((api), detrace_cu_, "cu" #call); \
  } while (0)
