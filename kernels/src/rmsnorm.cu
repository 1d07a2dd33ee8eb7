// Batch-invariant RMSNorm kernels (see detrace/kernels/rmsnorm.h for the guarantee and the exact
// summation order, which rmsnorm_cpu.cc mirrors) and the planted batch-variant one.
//
// One block per row, rmsNormThreads(hidden) threads. Thread t owns 8-element units t, t+T, ...;
// when it owns at most kMaxCachedUnits of them they stay in registers between the two passes,
// otherwise the second pass reloads them. 16-byte vector loads are used when every row start is
// 16-byte aligned and hidden % 8 == 0; otherwise elements are loaded one by one. Either way the
// arithmetic, and so the result, is the same: vectorisation never changes the order.
// Cached, vectorised rows of at most 256 threads (e.g. hidden 8192 in bf16) run a lean instance of
// the same kernel (no scalar path, launch bounds asking for 5-8 blocks per SM) so that more rows
// are in flight per SM; again the same operations in the same order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda_status.h"
#include "detrace/kernels/rmsnorm.h"
#include "convert.cuh"

namespace detrace::kernels {
namespace {

constexpr int kUnit = 8;
constexpr int kMaxCachedUnits = 4;
constexpr unsigned kFullMask = 0xffffffffu;

using detail::fromFloat;
using detail::toFloat;

// Eight elements of a row in their storage type: kept in registers between the two passes in
// this form (half the registers of floats for bf16/fp16; converting again is exact).
template <typename T>
struct alignas(16) Unit {
  T e[kUnit];
};

// Loads unit u (elements 8u .. 8u+7; those at or past hidden read as zero).
template <typename T>
__device__ __forceinline__ Unit<T> loadRaw(const T* row, int u, int hidden, bool vec) {
  Unit<T> r;
  if (vec) {
    constexpr int kWords = kUnit * sizeof(T) / 16;
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      const uint4 w = *(reinterpret_cast<const uint4*>(row + u * kUnit) + k);
      memcpy(reinterpret_cast<char*>(r.e) + 16 * k, &w, 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kUnit; ++i) {
      const int at = u * kUnit + i;
      r.e[i] = at < hidden ? row[at] : fromFloat<T>(0.0f);
    }
  }
  return r;
}

template <typename T>
__device__ __forceinline__ void storeRaw(T* row, int u, int hidden, bool vec,
                                         const Unit<T>& r) {
  if (vec) {
    constexpr int kWords = kUnit * sizeof(T) / 16;
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      uint4 w;
      memcpy(&w, reinterpret_cast<const char*>(r.e) + 16 * k, 16);
      *(reinterpret_cast<uint4*>(row + u * kUnit) + k) = w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kUnit; ++i) {
      if (u * kUnit + i < hidden) row[u * kUnit + i] = r.e[i];
    }
  }
}

template <typename T>
__device__ __forceinline__ void toFloats(const Unit<T>& r, float (&v)[kUnit]) {
#pragma unroll
  for (int i = 0; i < kUnit; ++i) v[i] = toFloat(r.e[i]);
}

// The same conversion written as inline assembly (bit-identical: bf16 -> fp32 is a 16-bit shift,
// fp16 -> fp32 the same cvt as __half2float). The second pass of the register-lean instance uses it
// so that the compiler cannot merge it with the first pass's conversion, which would keep the 8
// floats of every cached unit live across the barrier instead of its 4 packed words.
__device__ __forceinline__ void wordToFloatsAsm(uint32_t w, float* v, __nv_bfloat16) {
  uint32_t lo, hi;
  asm("shl.b32 %0, %2, 16;\n\tand.b32 %1, %2, 0xffff0000;" : "=r"(lo), "=r"(hi) : "r"(w));
  v[0] = __uint_as_float(lo);
  v[1] = __uint_as_float(hi);
}
__device__ __forceinline__ void wordToFloatsAsm(uint32_t w, float* v, __half) {
  const unsigned short lo = static_cast<unsigned short>(w & 0xffffu);
  const unsigned short hi = static_cast<unsigned short>(w >> 16);
  asm("cvt.f32.f16 %0, %1;" : "=f"(v[0]) : "h"(lo));
  asm("cvt.f32.f16 %0, %1;" : "=f"(v[1]) : "h"(hi));
}

template <typename T>
__device__ __forceinline__ void toFloatsLate(const Unit<T>& r, float (&v)[kUnit]) {
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int j = 0; j < kUnit / 2; ++j) {
      uint32_t w;
      memcpy(&w, reinterpret_cast<const char*>(r.e) + 4 * j, 4);
      wordToFloatsAsm(w, v + 2 * j, T{});
    }
  } else {
    toFloats(r, v);
  }
}

template <typename T>
__device__ __forceinline__ void loadUnit(const T* row, int u, int hidden, bool vec,
                                         float (&v)[kUnit]) {
  toFloats(loadRaw(row, u, hidden, vec), v);
}

template <typename T>
__device__ __forceinline__ void storeUnit(T* row, int u, int hidden, bool vec,
                                          const float (&v)[kUnit]) {
  Unit<T> r;
#pragma unroll
  for (int i = 0; i < kUnit; ++i) r.e[i] = fromFloat<T>(v[i]);
  storeRaw(row, u, hidden, vec, r);
}

// Unit u of the value being normalised: x, or round(x + residual), which is stored back.
template <typename T, bool kResidual>
__device__ __forceinline__ Unit<T> loadInput(const T* x, T* res, int u, int hidden,
                                             bool vec) {
  Unit<T> in = loadRaw(x, u, hidden, vec);
  if constexpr (kResidual) {
    const Unit<T> r = loadRaw<T>(res, u, hidden, vec);
#pragma unroll
    for (int i = 0; i < kUnit; ++i) {
      in.e[i] = fromFloat<T>(__fadd_rn(toFloat(in.e[i]), toFloat(r.e[i])));
    }
    storeRaw(res, u, hidden, vec, in);
  }
  return in;
}

__device__ __forceinline__ float addSquares(float p, int u, int hidden,
                                            const float (&v)[kUnit]) {
#pragma unroll
  for (int i = 0; i < kUnit; ++i) {
    if (u * kUnit + i < hidden) p = __fadd_rn(p, __fmul_rn(v[i], v[i]));
  }
  return p;
}

// Block-wide total of the thread partials: warp butterflies, then warp totals in warp order.
__device__ __forceinline__ float blockTotal(float p) {
  __shared__ float warp_totals[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) p = __fadd_rn(p, __shfl_xor_sync(kFullMask, p, o));
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) warp_totals[warp] = p;
  __syncthreads();
  float total = warp_totals[0];
  const int warps = blockDim.x / 32;
  for (int w = 1; w < warps; ++w) total = __fadd_rn(total, warp_totals[w]);
  return total;
}

__device__ __forceinline__ float invRms(float total, int hidden, float eps) {
  const float mean = __fdiv_rn(total, static_cast<float>(hidden));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

template <typename T>
__device__ __forceinline__ void writeOutput(const T* w, T* y, int u, int hidden, bool vec,
                                            float inv, const float (&v)[kUnit]) {
  float wf[kUnit];
  loadUnit(w, u, hidden, vec, wf);
  float o[kUnit];
#pragma unroll
  for (int i = 0; i < kUnit; ++i) o[i] = __fmul_rn(__fmul_rn(v[i], inv), wf[i]);
  storeUnit(y, u, hidden, vec, o);
}

// kMaxThreads / kMinBlocks: the launch bounds. The default instance takes any block size (up to
// 1024 threads); the small-block instances (<= 256 threads) ask ptxas for kMinBlocks resident
// blocks per SM, i.e. fewer registers, so more rows are in flight per SM.
// kVecOnly: launched only when `vec` holds, so the element-by-element path is not compiled in
// (fewer registers); same arithmetic either way.
template <typename T, bool kResidual, bool kCached, int kMaxThreads = 1024, int kMinBlocks = 1,
          bool kVecOnly = false>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks)
    rmsNormKernel(const T* __restrict__ x, T* residual, const T* __restrict__ w, T* y,
                  int64_t hidden64, float eps, bool vec_arg) {
  const bool vec = kVecOnly || vec_arg;
  const int hidden = static_cast<int>(hidden64);  // <= kRmsNormMaxHidden: 32-bit row indices
  const int units = (hidden + kUnit - 1) / kUnit;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  const T* xr = x + offset;
  T* rr = kResidual ? residual + offset : nullptr;
  T* yr = y + offset;
  const int threads = blockDim.x;
  float p = 0.0f;
  if constexpr (kCached) {
    Unit<T> cache[kMaxCachedUnits];
#pragma unroll
    for (int k = 0; k < kMaxCachedUnits; ++k) {
      const int u = static_cast<int>(threadIdx.x) + k * threads;
      if (u < units) cache[k] = loadInput<T, kResidual>(xr, rr, u, hidden, vec);
    }
#pragma unroll
    for (int k = 0; k < kMaxCachedUnits; ++k) {
      const int u = static_cast<int>(threadIdx.x) + k * threads;
      if (u < units) {
        float v[kUnit];
        toFloats(cache[k], v);
        p = addSquares(p, u, hidden, v);
      }
    }
    const float inv = invRms(blockTotal(p), hidden, eps);
#pragma unroll
    for (int k = 0; k < kMaxCachedUnits; ++k) {
      const int u = static_cast<int>(threadIdx.x) + k * threads;
      if (u < units) {
        float v[kUnit];
        if constexpr (kVecOnly) {
          toFloatsLate(cache[k], v);
        } else {
          toFloats(cache[k], v);
        }
        writeOutput(w, yr, u, hidden, vec, inv, v);
      }
    }
  } else {
    for (int u = static_cast<int>(threadIdx.x); u < units; u += threads) {
      float v[kUnit];
      toFloats(loadInput<T, kResidual>(xr, rr, u, hidden, vec), v);
      p = addSquares(p, u, hidden, v);
    }
    const float inv = invRms(blockTotal(p), hidden, eps);
    for (int u = static_cast<int>(threadIdx.x); u < units; u += threads) {
      float v[kUnit];
      loadUnit<T>(kResidual ? rr : xr, u, hidden, vec, v);  // the residual now holds the sum
      writeOutput(w, yr, u, hidden, vec, inv, v);
    }
  }
}

// Planted batch-variant path: one warp per row, lane l sums the contiguous slice
// [l * c, (l + 1) * c) and the lanes are combined with a shfl_down tree.
template <typename T>
__global__ void __launch_bounds__(256) warpPerRowKernel(const T* __restrict__ x,
                                                        const T* __restrict__ w, T* y,
                                                        int64_t rows, int64_t hidden, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const T* xr = x + row * hidden;
  T* yr = y + row * hidden;
  const int64_t slice = (hidden + 31) / 32;
  float p = 0.0f;
  for (int64_t i = lane * slice; i < (lane + 1) * slice && i < hidden; ++i) {
    const float v = toFloat(xr[i]);
    p = __fadd_rn(p, __fmul_rn(v, v));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) p = __fadd_rn(p, __shfl_down_sync(kFullMask, p, o));
  const float inv = invRms(__shfl_sync(kFullMask, p, 0), hidden, eps);
  for (int64_t i = lane; i < hidden; i += 32) {
    yr[i] = fromFloat<T>(__fmul_rn(__fmul_rn(toFloat(xr[i]), inv), toFloat(w[i])));
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Rows of <= 256 threads that are cached and vectorised run a dedicated instance (no scalar path)
// that asks ptxas for kMinBlocks resident 256-thread blocks per SM. "auto" takes, per dtype and
// residual, the most blocks that ptxas (CUDA 13, sm_90) fits without spilling: bf16 8 (32
// registers) without residual and 6 (40) with; fp16 8 (32); fp32 5 (48). 0 keeps the generic
// instance (64 registers for bf16: 4 blocks per SM).
// DETRACE_RMSNORM_MIN_BLOCKS=auto|0|5|6|8 overrides the default (read once; for measuring).
// Measured on the H200 (bench_kernels, bf16 4096 x 8192, one run): generic 86.3 % of the copy
// ceiling without residual and 87.2 % with; auto 89.0 % and 91.3 %; forcing 8 with the residual
// spills and drops to 62.5 %. So auto.
constexpr int kMinBlocksAuto = -1;
constexpr int kSmallBlockMinBlocksDefault = kMinBlocksAuto;

int smallBlockMinBlocks() {
  static const int v = [] {
    const char* e = std::getenv("DETRACE_RMSNORM_MIN_BLOCKS");
    if (e == nullptr || *e == '\0') return kSmallBlockMinBlocksDefault;
    if (std::strcmp(e, "auto") == 0) return kMinBlocksAuto;
    const int n = std::atoi(e);
    return n == 5 || n == 6 || n == 8 ? n : 0;
  }();
  return v;
}

template <typename T, bool kResidual>
int autoMinBlocks() {
  if constexpr (sizeof(T) == 4) return 5;
  if constexpr (std::is_same_v<T, __half>) return 8;
  return kResidual ? 6 : 8;
}

template <typename T, bool kResidual, int kMinBlocks>
void launchSmall(unsigned grid, int threads, cudaStream_t stream, const T* x, T* r, const T* w,
                 T* y, int64_t hidden, float eps) {
  rmsNormKernel<T, kResidual, true, 256, kMinBlocks, true>
      <<<grid, threads, 0, stream>>>(x, r, w, y, hidden, eps, true);
}

template <typename T, bool kResidual>
Status launchRmsNorm(const void* x, void* residual, const void* weight, void* y, int64_t rows,
                     int64_t hidden, float eps, cudaStream_t stream) {
  if (rows == 0) return Status::ok();
  if (rows > 0x7fffffff) {
    return makeError(ErrorCode::kInvalidArgument, "RMSNorm of {} rows: at most 2^31-1", rows);
  }
  const int threads = rmsNormThreads(hidden);
  const int64_t units = (hidden + kUnit - 1) / kUnit;
  const bool cached = (units + threads - 1) / threads <= kMaxCachedUnits;
  const bool vec = hidden % kUnit == 0 && aligned16(x) && aligned16(weight) && aligned16(y) &&
                   (!kResidual || aligned16(residual));
  const auto* xt = static_cast<const T*>(x);
  auto* rt = static_cast<T*>(residual);
  const auto* wt = static_cast<const T*>(weight);
  auto* yt = static_cast<T*>(y);
  const auto grid = static_cast<unsigned>(rows);
  int min_blocks = threads <= 256 && cached && vec ? smallBlockMinBlocks() : 0;
  if (min_blocks == kMinBlocksAuto) min_blocks = autoMinBlocks<T, kResidual>();
  if (min_blocks == 5) {
    launchSmall<T, kResidual, 5>(grid, threads, stream, xt, rt, wt, yt, hidden, eps);
  } else if (min_blocks == 6) {
    launchSmall<T, kResidual, 6>(grid, threads, stream, xt, rt, wt, yt, hidden, eps);
  } else if (min_blocks == 8) {
    launchSmall<T, kResidual, 8>(grid, threads, stream, xt, rt, wt, yt, hidden, eps);
  } else if (cached) {
    rmsNormKernel<T, kResidual, true><<<grid, threads, 0, stream>>>(xt, rt, wt, yt, hidden, eps, vec);
  } else {
    rmsNormKernel<T, kResidual, false><<<grid, threads, 0, stream>>>(xt, rt, wt, yt, hidden, eps, vec);
  }
  DETRACE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

template <bool kResidual>
Status dispatch(const void* x, void* residual, const void* weight, void* y, int64_t rows,
                int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::kF32:
      return launchRmsNorm<float, kResidual>(x, residual, weight, y, rows, hidden, eps, stream);
    case DType::kF16:
      return launchRmsNorm<__half, kResidual>(x, residual, weight, y, rows, hidden, eps, stream);
    case DType::kBF16:
      return launchRmsNorm<__nv_bfloat16, kResidual>(x, residual, weight, y, rows, hidden, eps,
                                                     stream);
  }
  return makeError(ErrorCode::kInvalidArgument, "unknown dtype {}", static_cast<int>(dtype));
}

template <typename T>
Status launchWarpPerRow(const void* x, const void* weight, void* y, int64_t rows, int64_t hidden,
                        float eps, cudaStream_t stream) {
  const auto grid = static_cast<unsigned>((rows + 7) / 8);
  warpPerRowKernel<T><<<grid, 256, 0, stream>>>(static_cast<const T*>(x),
                                                static_cast<const T*>(weight), static_cast<T*>(y),
                                                rows, hidden, eps);
  DETRACE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

}  // namespace

Status rmsNorm(const void* x, const void* weight, void* y, int64_t rows, int64_t hidden, float eps,
               DType dtype, cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(detail::checkRmsNormArgs(x, weight, y, rows, hidden));
  return dispatch<false>(x, nullptr, weight, y, rows, hidden, eps, dtype, stream);
}

Status rmsNormAddResidual(const void* x, void* residual, const void* weight, void* y, int64_t rows,
                          int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(detail::checkRmsNormArgs(x, weight, y, rows, hidden));
  if (rows > 0 && residual == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "RMSNorm got a null residual");
  }
  return dispatch<true>(x, residual, weight, y, rows, hidden, eps, dtype, stream);
}

Status planted_batchVariantRmsNorm(const void* x, const void* weight, void* y, int64_t rows,
                                   int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  constexpr int64_t kSwitchRows = 64;
  DETRACE_RETURN_IF_ERROR(detail::checkRmsNormArgs(x, weight, y, rows, hidden));
  if (rows < kSwitchRows) return rmsNorm(x, weight, y, rows, hidden, eps, dtype, stream);
  if (rows / 8 > 0x7fffffff) {
    return makeError(ErrorCode::kInvalidArgument, "RMSNorm of {} rows is too many", rows);
  }
  switch (dtype) {
    case DType::kF32: return launchWarpPerRow<float>(x, weight, y, rows, hidden, eps, stream);
    case DType::kF16: return launchWarpPerRow<__half>(x, weight, y, rows, hidden, eps, stream);
    case DType::kBF16:
      return launchWarpPerRow<__nv_bfloat16>(x, weight, y, rows, hidden, eps, stream);
  }
  return makeError(ErrorCode::kInvalidArgument, "unknown dtype {}", static_cast<int>(dtype));
}

}  // namespace detrace::kernels
