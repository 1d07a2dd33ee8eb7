// Distances between replayed outputs (replay_metrics.h). The 16-bit conversions are kernels/
// dtype.h's, the same ones the CPU twins use (header-only, no CUDA).
#include "detrace/replay/replay_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "detrace/kernels/dtype.h"

namespace detrace::replay {
namespace {

uint64_t loadBits(const uint8_t* data, int64_t i, int size) {
  uint64_t v = 0;
  std::memcpy(&v, data + i * size, static_cast<size_t>(size));  // little-endian host
  return v;
}

bool isNan(db::DType dtype, uint64_t bits) {
  switch (dtype) {
    case db::DType::kF32: return (bits & 0x7fffffffu) > 0x7f800000u;
    case db::DType::kF16: return (bits & 0x7fffu) > 0x7c00u;
    case db::DType::kBF16: return (bits & 0x7fffu) > 0x7f80u;
    case db::DType::kF64:
      return (bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return false;
  }
}

// Sign-magnitude bits -> an integer that grows with the value (+0 and -0 -> 0).
int64_t ordered(uint64_t bits, int size) {
  const int sign_shift = size * 8 - 1;
  const uint64_t magnitude = bits & ((uint64_t{1} << sign_shift) - 1);
  const bool negative = ((bits >> sign_shift) & 1u) != 0;
  return negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
}

double rms(std::span<const double> values) {
  double sum = 0.0;
  for (double v : values) sum += std::isfinite(v) ? v * v : 0.0;
  return values.empty() ? 0.0 : std::sqrt(sum / static_cast<double>(values.size()));
}

// Folds one element's difference into `d` (x: the replayed value, ref: the reference value).
void accumulate(Distance& d, int64_t i, uint64_t ulp, double x, double ref, double floor) {
  if (ulp == std::numeric_limits<uint64_t>::max()) {
    ++d.nan_mismatch;
    if (d.worst < 0) d.worst = i;
    return;
  }
  if (ulp > d.max_ulp) {
    d.max_ulp = ulp;
    d.worst = i;
  } else if (d.worst < 0) {
    d.worst = i;
  }
  if (std::isfinite(x) && std::isfinite(ref)) {
    const double abs = std::fabs(x - ref);
    d.max_abs = std::max(d.max_abs, abs);
    d.max_rel = std::max(d.max_rel, abs / std::max(std::fabs(ref), floor));
  }
}

double floorOf(std::span<const double> values) {
  const double f = 1e-2 * rms(values);
  return f > 0.0 ? f : std::numeric_limits<double>::min();
}

}  // namespace

bool isFloatDType(db::DType dtype) {
  return dtype == db::DType::kF32 || dtype == db::DType::kF16 || dtype == db::DType::kBF16;
}

double elementValue(const uint8_t* data, int64_t i, db::DType dtype) {
  switch (dtype) {
    case db::DType::kF32: {
      float f;
      std::memcpy(&f, data + i * 4, 4);
      return static_cast<double>(f);
    }
    case db::DType::kF16:
      return static_cast<double>(kernels::halfToFloat(static_cast<uint16_t>(loadBits(data, i, 2))));
    case db::DType::kBF16:
      return static_cast<double>(kernels::bf16ToFloat(static_cast<uint16_t>(loadBits(data, i, 2))));
    case db::DType::kF64: {
      double v;
      std::memcpy(&v, data + i * 8, 8);
      return v;
    }
    default: return 0.0;
  }
}

uint64_t ulpDistance(db::DType dtype, uint64_t a_bits, uint64_t b_bits) {
  const int size = db::dtypeSize(dtype);
  const bool a_nan = isNan(dtype, a_bits), b_nan = isNan(dtype, b_bits);
  if (a_nan || b_nan) return a_nan && b_nan ? 0 : std::numeric_limits<uint64_t>::max();
  const int64_t x = ordered(a_bits, size), y = ordered(b_bits, size);
  return x > y ? static_cast<uint64_t>(x) - static_cast<uint64_t>(y)
               : static_cast<uint64_t>(y) - static_cast<uint64_t>(x);
}

Distance compareOutputs(const OutputShape& shape, std::span<const uint8_t> x,
                        std::span<const uint8_t> ref) {
  Distance d;
  const int size = db::dtypeSize(shape.dtype);
  const int64_t n = std::min<int64_t>(shape.elements(),
                                      static_cast<int64_t>(std::min(x.size(), ref.size())) / size);
  std::vector<double> ref_values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref_values[static_cast<size_t>(i)] = elementValue(ref.data(), i, shape.dtype);
  const double floor = floorOf(ref_values);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t a = loadBits(x.data(), i, size), b = loadBits(ref.data(), i, size);
    if (a == b) continue;
    ++d.differing;
    accumulate(d, i, ulpDistance(shape.dtype, a, b), elementValue(x.data(), i, shape.dtype),
               ref_values[static_cast<size_t>(i)], floor);
  }
  return d;
}

std::vector<uint8_t> roundExact(std::span<const double> exact, db::DType dtype) {
  const int size = db::dtypeSize(dtype);
  std::vector<uint8_t> out(exact.size() * static_cast<size_t>(size));
  for (size_t i = 0; i < exact.size(); ++i) {
    const auto f = static_cast<float>(exact[i]);
    uint16_t h = 0;
    switch (dtype) {
      case db::DType::kF32: std::memcpy(out.data() + i * 4, &f, 4); continue;
      case db::DType::kF16: h = kernels::floatToHalf(f); break;
      case db::DType::kBF16: h = kernels::floatToBf16(f); break;
      case db::DType::kF64: std::memcpy(out.data() + i * 8, &exact[i], 8); continue;
      default: continue;
    }
    std::memcpy(out.data() + i * 2, &h, 2);
  }
  return out;
}

Distance compareToExact(const OutputShape& shape, std::span<const uint8_t> x,
                        std::span<const double> exact) {
  Distance d;
  const int size = db::dtypeSize(shape.dtype);
  const std::vector<uint8_t> rounded = roundExact(exact, shape.dtype);
  const double floor = floorOf(exact);
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(exact.size()),
                                      static_cast<int64_t>(x.size()) / size);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t a = loadBits(x.data(), i, size), b = loadBits(rounded.data(), i, size);
    const double xv = elementValue(x.data(), i, shape.dtype);
    const double ref = exact[static_cast<size_t>(i)];
    if (a != b) ++d.differing;
    if (a == b && xv == ref) continue;
    accumulate(d, i, a == b ? 0 : ulpDistance(shape.dtype, a, b), xv, ref, floor);
  }
  return d;
}

}  // namespace detrace::replay
