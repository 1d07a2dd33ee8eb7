// How far apart two outputs of a replayed op are: bitwise, in units in the last place of their
// dtype, and in absolute and relative terms. Plain C++ (no CUDA), so it is tested on the CPU.
//
// ULP distance: each value's bits are mapped to a monotonic integer (sign-magnitude to two's
// complement: +0 and -0 both map to 0), and the distance is the difference of those integers, so
// adjacent representable values are 1 apart, whatever their exponent. A NaN against anything but
// a NaN counts as an infinite distance (`nan_mismatch`).
// Relative distance: |x - y| / max(|y|, floor) with floor = 1e-2 * rms(y), y being the reference
// side; the floor keeps sums that cancel to almost nothing from dominating (the same rule as
// kernels::compareToReference).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "detrace/db/records.h"

namespace detrace::replay {

// A packed, row-major output: `rows` rows of `cols` elements of `dtype`.
struct OutputShape {
  db::DType dtype = db::DType::kUnknown;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t elements() const { return rows * cols; }
  int64_t bytes() const { return elements() * db::dtypeSize(dtype); }
};

struct Distance {
  int64_t differing = 0;    // elements whose bits differ
  int64_t nan_mismatch = 0; // elements where exactly one side is NaN
  uint64_t max_ulp = 0;     // over elements where neither or both are NaN
  double max_abs = 0.0;
  double max_rel = 0.0;
  int64_t worst = -1;       // element index of max_ulp (-1: identical)
  bool identical() const { return differing == 0; }
};

// The dtypes replay understands as values: fp32, fp16, bf16 (and fp64 for references).
bool isFloatDType(db::DType dtype);

// Element i of a packed buffer of `dtype`, as a double (exact for every supported dtype).
double elementValue(const uint8_t* data, int64_t i, db::DType dtype);

// The distance in units in the last place between two values' bit patterns of `dtype`
// (fp32, fp16 or bf16, passed in the low bits). UINT64_MAX if exactly one is NaN.
uint64_t ulpDistance(db::DType dtype, uint64_t a_bits, uint64_t b_bits);

// Compares two packed buffers of the same shape, `ref` being the reference side.
Distance compareOutputs(const OutputShape& shape, std::span<const uint8_t> x,
                        std::span<const uint8_t> ref);

// Compares a packed buffer with exact values (an fp64 reference): ULPs against the reference
// rounded to the dtype, absolute and relative against the exact values.
Distance compareToExact(const OutputShape& shape, std::span<const uint8_t> x,
                        std::span<const double> exact);

// Rounds exact values to `dtype` (round to nearest even, through fp32 for 16-bit types as the GPU
// stores do), packed.
std::vector<uint8_t> roundExact(std::span<const double> exact, db::DType dtype);

}  // namespace detrace::replay
