// Host side of detrace's own GEMMs (gemm.h): argument checks, kernel choice by device, TMA tensor
// maps for the wgmma kernel, and the planted split-K GEMM. Kernels live in gemm_mma.cu and
// gemm_wgmma_sm90a.cu; this file turns their errors into Status values naming the failed call.
#include "detrace/kernels/gemm.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "cuda_status.h"
#include "gemm_internal.h"

namespace detrace::kernels {
namespace {

using gemm_detail::LaunchError;

Status launchStatus(const LaunchError& e) {
  return e.ok() ? Status::ok() : detail::runtimeError(e.code, e.call);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Compute capability of the current device as 10 * major + minor.
Result<int> currentComputeCapability() {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) {
    return makeError(ErrorCode::kUnavailable, "cudaGetDevice failed: {}: run on a machine with a "
                     "CUDA device", cudaGetErrorString(err));
  }
  int major = 0;
  int minor = 0;
  DETRACE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DETRACE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return 10 * major + minor;
}

// cuTensorMapEncodeTiled, resolved through the runtime (cudaGetDriverEntryPointByVersion) so that
// detrace_kernels never links libcuda.so.1 and still loads on machines without a GPU driver.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

Result<EncodeTiledFn> encodeTiledFn() {
  struct Lookup {
    void* fn = nullptr;
    cudaError_t err = cudaSuccess;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
  };
  static const Lookup lookup = [] {  // thread-safe, once per process
    Lookup l;
    l.err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &l.fn, 12000,
                                             cudaEnableDefault, &l.query);
    return l;
  }();
  if (lookup.err != cudaSuccess) {
    return detail::runtimeError(lookup.err, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
  }
  if (lookup.query != cudaDriverEntryPointSuccess || lookup.fn == nullptr) {
    return makeError(ErrorCode::kUnavailable,
                     "the driver has no cuTensorMapEncodeTiled (entry point query result {}): "
                     "update the driver or use GemmKernel::kMmaSync",
                     static_cast<int>(lookup.query));
  }
  return reinterpret_cast<EncodeTiledFn>(lookup.fn);
}

// Tensor map of a K-major matrix (`rows` × k, leading dimension k) read in boxes of
// kWgmmaBK × box_rows with the 128-byte swizzle; out-of-bounds elements read as zero.
Result<CUtensorMap> kMajorTensorMap(const void* ptr, DType type, int64_t rows, int64_t k,
                                    uint32_t box_rows) {
  DETRACE_ASSIGN_OR_RETURN(EncodeTiledFn encode, encodeTiledFn());
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {gemm_detail::kWgmmaBK, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUtensorMapDataType dtype =
      type == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(&map, dtype, 2, const_cast<void*>(ptr), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return makeError(ErrorCode::kInternal, "cuTensorMapEncodeTiled({} rows x {} cols, box {} x "
                     "{}) failed: CUresult {}", rows, k, box_rows, gemm_detail::kWgmmaBK,
                     static_cast<int>(r));
  }
  return map;
}

Status runWgmma(const GemmArgs& args, cudaStream_t stream) {
  gemm_detail::WgmmaLaunch p;
  DETRACE_ASSIGN_OR_RETURN(p.map_a, kMajorTensorMap(args.a, args.in_type, args.m, args.k,
                                                     gemm_detail::kWgmmaBM));
  DETRACE_ASSIGN_OR_RETURN(p.map_b, kMajorTensorMap(args.b, args.in_type, args.n, args.k,
                                                     gemm_detail::kWgmmaBN));
  p.d = args.d;
  p.m = static_cast<int>(args.m);
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  return launchStatus(gemm_detail::launchWgmmaGemm(args.in_type, args.out_type, p, stream));
}

gemm_detail::MmaLaunch mmaLaunch(const GemmArgs& args, void* d, int splits) {
  gemm_detail::MmaLaunch p;
  p.a = args.a;
  p.b = args.b;
  p.d = d;
  p.m = static_cast<int>(args.m);
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  p.splits = splits;
  return p;
}

}  // namespace

const char* gemmKernelName(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAuto: return "auto";
    case GemmKernel::kMmaSync: return "mma.sync";
    case GemmKernel::kWgmma: return "wgmma";
  }
  return "?";
}

Status validateGemm(const GemmArgs& args) {
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMaxM = int64_t{65535} * gemm_detail::kMmaBM;  // grid.y limit
  if (args.m < 0 || args.m > kMaxM) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM M = {} is outside [0, {}]", args.m, kMaxM);
  }
  if (args.n < 1 || args.n > kMaxDim || args.k < 1 || args.k > kMaxDim) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM N = {}, K = {}: both must be in [1, 2^31)",
                     args.n, args.k);
  }
  if (args.k % 8 != 0 || args.n % 8 != 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "GEMM N = {}, K = {}: both must be multiples of 8 (16-byte rows); pad the "
                     "weight and the activations", args.n, args.k);
  }
  if (args.in_type == DType::kF32) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM inputs must be bf16 or fp16, not fp32");
  }
  if (args.out_type != args.in_type && args.out_type != DType::kF32) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM output must be {} (the input type) or "
                     "fp32, not {}", dtypeName(args.in_type), dtypeName(args.out_type));
  }
  if (args.m == 0) return Status::ok();
  if (args.a == nullptr || args.b == nullptr || args.d == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM with M = {} needs non-null A, B and D",
                     args.m);
  }
  if (!aligned16(args.a) || !aligned16(args.b) || !aligned16(args.d)) {
    return makeError(ErrorCode::kInvalidArgument, "GEMM pointers must be 16-byte aligned "
                     "(A {}, B {}, D {})", args.a, args.b, static_cast<const void*>(args.d));
  }
  return Status::ok();
}

Result<GemmKernel> resolveGemmKernel(GemmKernel kernel) {
  DETRACE_ASSIGN_OR_RETURN(int cc, currentComputeCapability());
  if (kernel == GemmKernel::kAuto) kernel = cc == 90 ? GemmKernel::kWgmma : GemmKernel::kMmaSync;
  if (kernel == GemmKernel::kWgmma && cc != 90) {
    return makeError(ErrorCode::kUnavailable, "the wgmma GEMM is built for sm_90a and this device "
                     "is compute capability {}.{}: use GemmKernel::kMmaSync", cc / 10, cc % 10);
  }
  if (cc < 80) {
    return makeError(ErrorCode::kUnavailable, "detrace's GEMM kernels need compute capability "
                     "8.0 or newer, this device is {}.{}", cc / 10, cc % 10);
  }
  return kernel;
}

Status gemmBatchInvariant(const GemmArgs& args, cudaStream_t stream, GemmKernel kernel) {
  DETRACE_RETURN_IF_ERROR(validateGemm(args));
  if (args.m == 0) return Status::ok();
  DETRACE_ASSIGN_OR_RETURN(GemmKernel resolved, resolveGemmKernel(kernel));
  if (resolved == GemmKernel::kWgmma) return runWgmma(args, stream);
  return launchStatus(gemm_detail::launchMmaGemm(args.in_type, args.out_type,
                                                 mmaLaunch(args, args.d, 1), stream));
}

size_t planted_splitKWorkspaceBytes(const GemmArgs& args) {
  if (args.m <= 0 || args.m > kPlantedSplitKMaxM) return 0;
  return static_cast<size_t>(kPlantedSplitK) * static_cast<size_t>(args.m) *
         static_cast<size_t>(args.n) * sizeof(float);
}

Status planted_splitKGemm(const GemmArgs& args, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(validateGemm(args));
  if (args.m == 0) return Status::ok();
  DETRACE_RETURN_IF_ERROR(resolveGemmKernel(GemmKernel::kMmaSync).status());
  if (args.m > kPlantedSplitKMaxM) {
    return launchStatus(gemm_detail::launchMmaGemm(args.in_type, args.out_type,
                                                   mmaLaunch(args, args.d, 1), stream));
  }
  const size_t need = planted_splitKWorkspaceBytes(args);
  if (workspace == nullptr || workspace_bytes < need || !aligned16(workspace)) {
    return makeError(ErrorCode::kInvalidArgument, "planted split-K GEMM needs a 16-byte aligned "
                     "workspace of {} bytes, got {} bytes at {}", need, workspace_bytes, workspace);
  }
  DETRACE_RETURN_IF_ERROR(launchStatus(gemm_detail::launchMmaGemm(
      args.in_type, DType::kF32, mmaLaunch(args, workspace, kPlantedSplitK), stream)));
  return launchStatus(gemm_detail::launchSplitKReduce(args.out_type,
                                                      static_cast<const float*>(workspace),
                                                      kPlantedSplitK, args.m * args.n, args.d,
                                                      stream));
}

}  // namespace detrace::kernels
