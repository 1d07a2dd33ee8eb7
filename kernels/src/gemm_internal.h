// Private to kernels/src: the launchers behind gemm.h. The .cu files hold kernels and thin launchers
// only (C++17, no Status/fmt so nvcc never parses them); gemm.cc validates, encodes TMA maps and
// turns the launchers' errors into Status values.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "detrace/kernels/gemm_types.h"

namespace detrace::kernels::gemm_detail {

// A failed CUDA runtime call inside a launcher: the error and the call's text.
struct LaunchError {
  cudaError_t code = cudaSuccess;
  const char* call = nullptr;
  bool ok() const { return code == cudaSuccess; }
};

// ---- mma.sync kernel (gemm_mma.cu), sm_80 and newer. ----
inline constexpr int kMmaBM = 128;
inline constexpr int kMmaBN = 256;
inline constexpr int kMmaBK = 32;

struct MmaLaunch {
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;  // splits == 1: M×N of out_type; splits > 1: `splits` fp32 M×N slabs
  int m = 0;
  int n = 0;
  int k = 0;
  int splits = 1;  // K split into this many contiguous ranges of whole BK tiles (planted only)
};

// D (or the fp32 partial slabs) for one call. `out` is ignored when splits > 1 (always fp32).
LaunchError launchMmaGemm(DType in, DType out, const MmaLaunch& p, cudaStream_t stream);

// d[i] = convert(sum over s = 0..splits-1, in that order, of partials[s * count + i]).
LaunchError launchSplitKReduce(DType out, const float* partials, int splits, int64_t count,
                               void* d, cudaStream_t stream);

// ---- wgmma + TMA kernel (gemm_wgmma_sm90a.cu), built for sm_90a only. ----
inline constexpr int kWgmmaBM = 128;  // rows of A per CTA: two consumer warpgroups × 64
inline constexpr int kWgmmaBN = 256;  // rows of B (columns of D) per CTA
inline constexpr int kWgmmaBK = 64;   // 64 × 2 bytes = one 128-byte swizzle row

struct WgmmaLaunch {
  CUtensorMap map_a;  // A: dims {K, M}, box {kWgmmaBK, kWgmmaBM}, 128B swizzle, zero OOB fill
  CUtensorMap map_b;  // B: dims {K, N}, box {kWgmmaBK, kWgmmaBN}, 128B swizzle, zero OOB fill
  void* d = nullptr;
  int m = 0;
  int n = 0;
  int k = 0;
};

LaunchError launchWgmmaGemm(DType in, DType out, const WgmmaLaunch& p, cudaStream_t stream);

}  // namespace detrace::kernels::gemm_detail
