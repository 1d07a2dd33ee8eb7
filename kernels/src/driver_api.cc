#include "driver_api.h"

#include <dlfcn.h>

namespace detrace::kernels::detail {
namespace {

// The driver ABI the entry points are requested at: CUDA 12.0 semantics (legacy default stream),
// which every driver that can run sm_90 code provides.
constexpr int kAbiVersion = 12000;

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

template <typename Fn>
Status resolve(GetProcAddress get, const char* name, Fn& fn) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = get(name, &p, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found);
  if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || p == nullptr) {
    return makeError(ErrorCode::kUnavailable,
                     "the CUDA driver does not provide {} (CUDA {}.{} ABI): update the driver",
                     name, kAbiVersion / 1000, kAbiVersion % 1000 / 10);
  }
  fn = reinterpret_cast<Fn>(p);
  return Status::ok();
}

Result<DriverApi> load() {
  // The traced process normally has libcuda loaded already; dlopen then just returns it. The
  // handle is never closed: the entry points must stay valid for the life of the process.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return makeError(ErrorCode::kUnavailable,
                     "cannot load the CUDA driver (libcuda.so.1): {}; install the NVIDIA driver",
                     dlerror());
  }
  auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) {
    return makeError(ErrorCode::kUnavailable,
                     "the CUDA driver is too old (no cuGetProcAddress_v2): CUDA 12 or newer is needed");
  }
  DriverApi api{};
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuInit", api.Init));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuGetErrorName", api.GetErrorName));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuGetErrorString", api.GetErrorString));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuCtxGetCurrent", api.CtxGetCurrent));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuCtxGetDevice", api.CtxGetDevice));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuDeviceGetAttribute", api.DeviceGetAttribute));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuModuleLoadData", api.ModuleLoadData));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuModuleUnload", api.ModuleUnload));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuModuleGetFunction", api.ModuleGetFunction));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuFuncSetAttribute", api.FuncSetAttribute));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                  api.OccupancyMaxActiveBlocksPerMultiprocessor));
  DETRACE_RETURN_IF_ERROR(resolve(get, "cuLaunchKernel", api.LaunchKernel));
  return api;
}

}  // namespace

Result<const DriverApi*> driverApi() {
  static const Result<DriverApi> api = load();  // thread-safe one-time initialisation
  if (!api.isOk()) return api.status();
  return &api.value();
}

Status driverError(const DriverApi& api, CUresult r, const char* call) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.GetErrorName(r, &name) != CUDA_SUCCESS) name = "unknown CUresult";
  if (api.GetErrorString(r, &text) != CUDA_SUCCESS) text = "no description";
  ErrorCode code = ErrorCode::kInternal;
  switch (r) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      code = ErrorCode::kUnavailable;
      break;
    case CUDA_ERROR_INVALID_VALUE:
      code = ErrorCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return makeError(code, "{} failed: {} ({})", call, name, text);
}

}  // namespace detrace::kernels::detail
