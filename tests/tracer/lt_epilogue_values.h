// The values `tracer_gpu_app lt-epilogue` gives its matmuls (lt_epilogue_gpu_app.cuh), shared with
// the test that checks what the tracer copied (gpu_capture_test.cc). All are small multiples of
// 1/8, exact in bf16, so a value's bf16 bits are its float's upper half.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lt_epilogue_values {

inline constexpr int kM = 256, kN = 8, kK = 128;  // D is m x n: n tokens of m features

inline uint16_t bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}
inline uint16_t aValue(int i) { return bf16Bits(static_cast<float>(i % 13 - 6) * 0.125f); }
inline uint16_t bValue(int i) { return bf16Bits(static_cast<float>(i % 7 - 3) * 0.125f); }
inline uint16_t biasValue(int i) { return bf16Bits(static_cast<float>(i % 9 - 4) * 0.5f); }

// cublasLtEpilogue_t of the calls, in order: BIAS and GELU_AUX_BIAS on one descriptor with the
// bias and aux pointers set, then DEFAULT on a descriptor of its own without them. (On an H100,
// cuBLAS 13.0, bf16 256x8x128: with both pointers set, BIAS and GELU_AUX_BIAS run, GELU_BIAS is
// refused as not supported and DEFAULT, GELU and GELU_AUX as invalid: a descriptor keeping the
// pointers of another epilogue is not a call cuBLASLt takes.)
inline constexpr int32_t kEpilogues[] = {4, 164, 1};
inline constexpr size_t kWithBias = 2;  // the first two read the bias
inline constexpr size_t kWithAux = 1;   // the second writes the aux

}  // namespace lt_epilogue_values
