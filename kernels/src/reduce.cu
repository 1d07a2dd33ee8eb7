// Fixed-order reduction kernels (see detrace/kernels/reduce.h) and the planted racy reduction.
//
// One thread reduces 16-byte vectors of elements (8 bf16/fp16 or 4 fp32) over all ranks, then a
// scalar pass takes the tail (and everything, when a pointer is not 16-byte aligned). Loads are
// issued in batches before any add so that each thread keeps 8 x 16 bytes in flight: 8 ranks of
// one vector, or (few ranks) 2 or 4 vectors at once. Adds are __fadd_rn (never contracted or reordered); the
// order is fixed by the leaf order the host wrote into the parameters and by TreeSum for kTree.
// Aligned reductions of 2, 3, 4, 5 or 8 ranks take fixedOrderReduceKernelN instead: the rank count
// is a template parameter, so the loads are unrolled and the tree's pairing is resolved at compile
// time (the run-time TreeSum levels cost registers and selects: 2 resident blocks per SM for
// tree N=4/8), on a grid of exactly the resident blocks. Same operations in the same order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda_status.h"
#include "detrace/kernels/reduce.h"
#include "reduce_device.cuh"

namespace detrace::kernels {
namespace {

using detail::FVec;
using detail::Pack;
using detail::reduceGroup;
using detail::reduceGroupN;
using detail::vectorGroup;
using detail::aligned16;
using detail::storePack;
using detail::toFloat;

constexpr int kThreads = 256;

struct ReduceParams {
  const void* src[kMaxReduceRanks];  // in leaf order
  void* out;
  uint64_t count;
  uint64_t vectors;  // count / V when every pointer is 16-byte aligned, else 0
  int nranks;
};

template <typename T, int kTreeLevels, int kVecs>
__global__ void __launch_bounds__(kThreads, 2) fixedOrderReduceKernel(const __grid_constant__ ReduceParams p) {
  constexpr int V = 16 / sizeof(T);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Vector path: thread tid takes vectors tid + (i * kVecs + u) * stride, u < kVecs, so each of
  // its kVecs streams is coalesced across the warp.
  for (uint64_t v0 = tid; v0 < p.vectors; v0 += stride * kVecs) {
    uint64_t elem[kVecs];
    bool valid[kVecs];
    vectorGroup<V, kVecs>(v0, stride, p.vectors, elem, valid);
    FVec<V> acc[kVecs];
    reduceGroup<T, V, kTreeLevels, kVecs>(p.src, p.nranks, elem, valid, acc);
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      if (valid[u]) storePack<T, V>(p.out, elem[u], acc[u]);
    }
  }
  for (uint64_t e = p.vectors * V + tid; e < p.count; e += stride) {
    const uint64_t elem[1] = {e};
    const bool valid[1] = {true};
    FVec<1> acc[1];
    reduceGroup<T, 1, kTreeLevels, 1>(p.src, p.nranks, elem, valid, acc);
    storePack<T, 1>(p.out, e, acc[0]);
  }
}

// Compile-time rank count (vector path only: launched when every pointer is 16-byte aligned); the
// scalar tail is the generic code. Same vector-to-thread mapping as fixedOrderReduceKernel.
template <typename T, int kN, bool kTree, int kVecs>
__global__ void __launch_bounds__(kThreads)
    fixedOrderReduceKernelN(const __grid_constant__ ReduceParams p) {
  constexpr int V = 16 / sizeof(T);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t v0 = tid; v0 < p.vectors; v0 += stride * kVecs) {
    uint64_t elem[kVecs];
    bool valid[kVecs];
    vectorGroup<V, kVecs>(v0, stride, p.vectors, elem, valid);
    FVec<V> acc[kVecs];
    reduceGroupN<T, V, kN, kTree, kVecs>(p.src, elem, valid, acc);
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      if (valid[u]) storePack<T, V>(p.out, elem[u], acc[u]);
    }
  }
  constexpr int kLevels = kTree ? detail::treeLevelsFor(kN) : 0;
  for (uint64_t e = p.vectors * V + tid; e < p.count; e += stride) {
    const uint64_t elem[1] = {e};
    const bool valid[1] = {true};
    FVec<1> acc[1];
    reduceGroup<T, 1, kLevels, 1>(p.src, p.nranks, elem, valid, acc);
    storePack<T, 1>(p.out, e, acc[0]);
  }
}

// Planted: block b adds rank `rank` of element group b / N; the N blocks of a group are
// neighbours, run concurrently on different SMs, and race on the same addresses. The rank a block
// takes is scrambled per group so that arrival order is not tied to block scheduling order.
template <typename T>
__device__ __forceinline__ void atomicAddPair(T* out, uint64_t i, float a, float b, bool pair);

template <>
__device__ __forceinline__ void atomicAddPair<__nv_bfloat16>(__nv_bfloat16* out, uint64_t i,
                                                             float a, float b, bool pair) {
  if (pair) {
    atomicAdd(reinterpret_cast<__nv_bfloat162*>(out + i), __floats2bfloat162_rn(a, b));
  } else {
    atomicAdd(out + i, __float2bfloat16_rn(a));
  }
}

template <>
__device__ __forceinline__ void atomicAddPair<__half>(__half* out, uint64_t i, float a, float b,
                                                      bool pair) {
  if (pair) {
    atomicAdd(reinterpret_cast<__half2*>(out + i), __floats2half2_rn(a, b));
  } else {
    atomicAdd(out + i, __float2half_rn(a));
  }
}

template <>
__device__ __forceinline__ void atomicAddPair<float>(float* out, uint64_t i, float a, float b,
                                                     bool pair) {
  atomicAdd(out + i, a);
  if (pair) atomicAdd(out + i + 1, b);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) racyReduceKernel(const __grid_constant__ ReduceParams p) {
  const int n = p.nranks;
  const uint64_t group = blockIdx.x / n;
  const int slot = static_cast<int>(blockIdx.x % n);
  const int flipped = (group & 1) ? n - 1 - slot : slot;
  const int rank = static_cast<int>((flipped + group) % n);
  const uint64_t i = (group * kThreads + threadIdx.x) * 2;  // two elements per thread
  if (i >= p.count) return;
  const bool pair = i + 1 < p.count;
  const T* src = static_cast<const T*>(p.src[rank]);
  const float a = toFloat(src[i]);
  const float b = pair ? toFloat(src[i + 1]) : 0.0f;
  atomicAddPair<T>(static_cast<T*>(p.out), i, a, b, pair);
}

Status smCount(int* sms) {
  int device = 0;
  DETRACE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  DETRACE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device));
  return Status::ok();
}

// Which kernel takes aligned reductions of 2, 3, 4, 5 or 8 ranks: 0 the generic one (run-time rank
// loop), 1 the compile-time-rank one with kN x kVecs = 8 loads in flight per thread (kVecs =
// max(1, 8 / kN)) on a resident grid. DETRACE_REDUCE_VARIANT=0|1 overrides the default (read once;
// for measuring). Measured on the H200 (bench_kernels, bf16, 64 MiB per rank, % of the copy
// ceiling, one run): generic rank N=2 87.9, tree N=4 85.6, tree N=8 81.8; variant 1 94.2, 99.1,
// 102.7 (and 93.4, 98.7, 102.8 in a second pass). 16 loads in flight (kVecs = 16 / kN) measured
// 92.1-92.9 at N=2 and the same as 8 elsewhere, so it was dropped.
constexpr int kReduceVariantDefault = 1;

int reduceVariant() {
  static const int v = [] {
    const char* e = std::getenv("DETRACE_REDUCE_VARIANT");
    if (e == nullptr || *e == '\0') return kReduceVariantDefault;
    return std::atoi(e) == 0 ? 0 : 1;
  }();
  return v;
}

// Launches the compile-time-rank kernel on as many blocks as are resident (a persistent grid: every
// thread gets the same number of vectors, no second wave), at most one vector per thread.
template <typename T, int kN, bool kTree, int kVecs>
Status launchN(const ReduceParams& p, int sms, cudaStream_t stream) {
  static const int per_sm = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fixedOrderReduceKernelN<T, kN, kTree, kVecs>,
                                                      kThreads, 0) != cudaSuccess) {
      b = 1;
    }
    return std::max(b, 1);
  }();
  const uint64_t needed = (p.vectors + kThreads - 1) / kThreads;
  const uint64_t blocks =
      std::clamp<uint64_t>(needed, 1, static_cast<uint64_t>(sms) * static_cast<uint64_t>(per_sm));
  fixedOrderReduceKernelN<T, kN, kTree, kVecs>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  DETRACE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

template <typename T, int kN, int kLoads>
Status launchNOrder(const ReduceParams& p, bool tree, int sms, cudaStream_t stream) {
  constexpr int kVecs = kLoads / kN > 1 ? kLoads / kN : 1;
  return tree ? launchN<T, kN, true, kVecs>(p, sms, stream)
              : launchN<T, kN, false, kVecs>(p, sms, stream);
}

template <typename T, int kLoads>
Status launchNRanks(const ReduceParams& p, bool tree, int sms, cudaStream_t stream) {
  switch (p.nranks) {
    case 2: return launchNOrder<T, 2, kLoads>(p, tree, sms, stream);
    case 3: return launchNOrder<T, 3, kLoads>(p, tree, sms, stream);
    case 4: return launchNOrder<T, 4, kLoads>(p, tree, sms, stream);
    case 5: return launchNOrder<T, 5, kLoads>(p, tree, sms, stream);
    default: return launchNOrder<T, 8, kLoads>(p, tree, sms, stream);
  }
}

bool hasRankInstance(int n) { return n == 2 || n == 3 || n == 4 || n == 5 || n == 8; }

template <typename T>
Status launchFixed(const ReduceParams& p, bool tree, cudaStream_t stream) {
  constexpr uint64_t V = 16 / sizeof(T);
  int sms = 0;
  DETRACE_RETURN_IF_ERROR(smCount(&sms));
  const int variant = reduceVariant();
  if (variant != 0 && p.vectors > 0 && hasRankInstance(p.nranks)) {
    return launchNRanks<T, 8>(p, tree, sms, stream);
  }
  const uint64_t items = std::max<uint64_t>(p.vectors, p.count - p.vectors * V);
  const uint64_t blocks = std::clamp<uint64_t>((items + kThreads - 1) / kThreads, 1,
                                               static_cast<uint64_t>(sms) * 8);
  const auto grid = static_cast<unsigned>(blocks);
  const int n = p.nranks;
  // Few ranks: several vectors per thread (loads in flight); tree depth: the smallest that fits.
  if (!tree) {
    if (n <= 2) {
      fixedOrderReduceKernel<T, 0, 4><<<grid, kThreads, 0, stream>>>(p);
    } else if (n <= 4) {
      fixedOrderReduceKernel<T, 0, 2><<<grid, kThreads, 0, stream>>>(p);
    } else {
      fixedOrderReduceKernel<T, 0, 1><<<grid, kThreads, 0, stream>>>(p);
    }
  } else if (n <= 2) {
    fixedOrderReduceKernel<T, 2, 4><<<grid, kThreads, 0, stream>>>(p);
  } else if (n <= 3) {
    fixedOrderReduceKernel<T, 2, 2><<<grid, kThreads, 0, stream>>>(p);
  } else if (n <= 4) {
    fixedOrderReduceKernel<T, 3, 2><<<grid, kThreads, 0, stream>>>(p);
  } else if (n <= 7) {
    fixedOrderReduceKernel<T, 3, 1><<<grid, kThreads, 0, stream>>>(p);
  } else if (n <= 15) {
    fixedOrderReduceKernel<T, 4, 1><<<grid, kThreads, 0, stream>>>(p);
  } else if (n <= 63) {
    fixedOrderReduceKernel<T, 6, 1><<<grid, kThreads, 0, stream>>>(p);
  } else {
    fixedOrderReduceKernel<T, 8, 1><<<grid, kThreads, 0, stream>>>(p);
  }
  DETRACE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

}  // namespace

Status fixedOrderReduce(const void* const* inputs, int nranks, void* out, size_t count, DType dtype,
                        ReduceOrder order, int start, cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(detail::checkReduceArgs(inputs, nranks, out, order, start));
  if (count == 0) return Status::ok();
  int leaves[kMaxReduceRanks];
  reduceLeafOrder(order, nranks, start, leaves);
  ReduceParams p{};
  bool aligned = aligned16(out);
  for (int k = 0; k < nranks; ++k) {
    p.src[k] = inputs[leaves[k]];
    aligned = aligned && aligned16(p.src[k]);
  }
  p.out = out;
  p.count = count;
  p.nranks = nranks;
  p.vectors = aligned ? count / (16 / dtypeSize(dtype)) : 0;
  const bool tree = order == ReduceOrder::kTree;
  switch (dtype) {
    case DType::kF32: return launchFixed<float>(p, tree, stream);
    case DType::kF16: return launchFixed<__half>(p, tree, stream);
    case DType::kBF16: return launchFixed<__nv_bfloat16>(p, tree, stream);
  }
  return makeError(ErrorCode::kInvalidArgument, "unknown dtype {}", static_cast<int>(dtype));
}

Status planted_racyReduce(const void* const* inputs, int nranks, void* out, size_t count,
                          DType dtype, cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(
      detail::checkReduceArgs(inputs, nranks, out, ReduceOrder::kRankOrder, 0));
  if ((reinterpret_cast<uintptr_t>(out) & 3) != 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "planted_racyReduce needs a 4-byte aligned output (packed atomics)");
  }
  if (count == 0) return Status::ok();
  DETRACE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out, 0, count * dtypeSize(dtype), stream));
  ReduceParams p{};
  for (int k = 0; k < nranks; ++k) p.src[k] = inputs[k];
  p.out = out;
  p.count = count;
  p.nranks = nranks;
  const uint64_t groups = (count + 2 * kThreads - 1) / (2 * kThreads);
  const uint64_t blocks = groups * static_cast<uint64_t>(nranks);
  if (blocks > 0x7fffffffull) {
    return makeError(ErrorCode::kInvalidArgument, "planted_racyReduce: {} elements is too many",
                     count);
  }
  const auto grid = static_cast<unsigned>(blocks);
  switch (dtype) {
    case DType::kF32: racyReduceKernel<float><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::kF16: racyReduceKernel<__half><<<grid, kThreads, 0, stream>>>(p); break;
    case DType::kBF16: racyReduceKernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p); break;
  }
  DETRACE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

}  // namespace detrace::kernels
