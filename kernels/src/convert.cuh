// Conversions between storage types and fp32 shared by the kernels (round to nearest even, the
// same as the CPU twins' conversions in dtype.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace detrace::kernels::detail {

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float toFloat(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T fromFloat(float x);
template <>
__device__ __forceinline__ float fromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half fromFloat<__half>(float x) { return __float2half_rn(x); }

}  // namespace detrace::kernels::detail
