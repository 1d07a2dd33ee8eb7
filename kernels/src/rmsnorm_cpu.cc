// CPU twin of the batch-invariant RMSNorm: mirrors rmsnorm.cu's per-thread partial sums, warp
// butterflies and warp-order total operation for operation (compiled with -ffp-contract=off).
#include <cmath>
#include <vector>

#include "detrace/kernels/rmsnorm.h"

namespace detrace::kernels {

int rmsNormThreads(int64_t hidden) {
  const int64_t units = (hidden + 7) / 8;
  const int64_t wanted = (units + 3) / 4;  // at most 4 units (32 elements) per thread
  const int64_t rounded = (wanted + 31) / 32 * 32;
  return static_cast<int>(rounded < 32 ? 32 : (rounded > 1024 ? 1024 : rounded));
}

namespace detail {

Status checkRmsNormArgs(const void* x, const void* weight, const void* y, int64_t rows,
                        int64_t hidden) {
  if (rows < 0 || hidden < 1 || hidden > kRmsNormMaxHidden) {
    return makeError(ErrorCode::kInvalidArgument,
                     "RMSNorm of {} rows x {} elements: rows must be >= 0 and hidden in [1, {}]",
                     rows, hidden, kRmsNormMaxHidden);
  }
  if (rows > 0 && (x == nullptr || weight == nullptr || y == nullptr)) {
    return makeError(ErrorCode::kInvalidArgument, "RMSNorm got a null buffer");
  }
  return Status::ok();
}

}  // namespace detail

namespace {

// The row's sum of squares, in the GPU's order.
float sumOfSquares(const float* v, int64_t hidden) {
  const int threads = rmsNormThreads(hidden);
  const int64_t units = (hidden + 7) / 8;
  std::vector<float> partial(static_cast<size_t>(threads), 0.0f);
  for (int t = 0; t < threads; ++t) {
    float p = 0.0f;
    for (int64_t u = t; u < units; u += threads) {
      for (int64_t i = u * 8; i < u * 8 + 8 && i < hidden; ++i) p = p + v[i] * v[i];
    }
    partial[static_cast<size_t>(t)] = p;
  }
  float total = 0.0f;
  for (int w = 0; w < threads / 32; ++w) {
    float lane[32];
    for (int l = 0; l < 32; ++l) lane[l] = partial[static_cast<size_t>(w * 32 + l)];
    for (int o = 16; o > 0; o >>= 1) {
      float next[32];
      for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
      for (int l = 0; l < 32; ++l) lane[l] = next[l];
    }
    total = w == 0 ? lane[0] : total + lane[0];
  }
  return total;
}

void normaliseRow(const float* v, const void* weight, void* y, int64_t row, int64_t hidden,
                  float eps, DType dtype) {
  const float mean = sumOfSquares(v, hidden) / static_cast<float>(hidden);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < hidden; ++i) {
    const float w = loadAsFloat(weight, static_cast<size_t>(i), dtype);
    storeFromFloat(y, static_cast<size_t>(row * hidden + i), dtype, (v[i] * inv) * w);
  }
}

}  // namespace

Status rmsNormCpu(const void* x, const void* weight, void* y, int64_t rows, int64_t hidden,
                  float eps, DType dtype) {
  DETRACE_RETURN_IF_ERROR(detail::checkRmsNormArgs(x, weight, y, rows, hidden));
  std::vector<float> v(static_cast<size_t>(hidden));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      v[static_cast<size_t>(i)] = loadAsFloat(x, static_cast<size_t>(r * hidden + i), dtype);
    }
    normaliseRow(v.data(), weight, y, r, hidden, eps, dtype);
  }
  return Status::ok();
}

Status rmsNormAddResidualCpu(const void* x, void* residual, const void* weight, void* y,
                             int64_t rows, int64_t hidden, float eps, DType dtype) {
  DETRACE_RETURN_IF_ERROR(detail::checkRmsNormArgs(x, weight, y, rows, hidden));
  if (rows > 0 && residual == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "RMSNorm got a null residual");
  }
  std::vector<float> v(static_cast<size_t>(hidden));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const auto at = static_cast<size_t>(r * hidden + i);
      const float s = roundTo(loadAsFloat(x, at, dtype) + loadAsFloat(residual, at, dtype), dtype);
      storeFromFloat(residual, at, dtype, s);
      v[static_cast<size_t>(i)] = s;
    }
    normaliseRow(v.data(), weight, y, r, hidden, eps, dtype);
  }
  return Status::ok();
}

}  // namespace detrace::kernels
