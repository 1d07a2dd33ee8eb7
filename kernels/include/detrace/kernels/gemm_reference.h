// CPU twin of the GEMMs: an fp64 reference for D[M,N] = A[M,K] · B[N,K]ᵀ (layout: gemm_types.h)
// over the exact bf16/fp16 input values, and its comparison with a GPU result. Host-only C++20;
// the 16-bit conversions are dtype.h's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "detrace/kernels/gemm_types.h"

namespace detrace::kernels {

// fp64 GEMM: out[i*n + j] = sum over p of a[i*k + p] * b[j*k + p], each product and sum in fp64
// (sequential in p, so the result is the same for any `threads`). `a` holds m*k and `b` n*k words
// of `in_type`. Blocked 4×4 over (i, j), K walked in chunks, columns of D split across `threads`
// std::threads (0 = std::thread::hardware_concurrency()).
std::vector<double> referenceGemmF64(int64_t m, int64_t n, int64_t k, DType in_type,
                                     std::span<const uint16_t> a, std::span<const uint16_t> b,
                                     int threads = 0);

// Error of a GEMM result against the fp64 reference. Each element's relative error is
// |d - ref| / max(|ref|, floor) with floor = 1e-2 · rms(ref), so the few sums that cancel to
// almost zero do not dominate; `max_abs` is the plain maximum absolute error.
struct GemmError {
  double max_rel = 0.0;
  double max_abs = 0.0;
  int64_t nonfinite = 0;  // elements of d that are NaN or inf
  int64_t worst_index = -1;
};

// `d` points to ref.size() host elements of `out_type` (row-major M×N, like `ref`).
GemmError compareToReference(DType out_type, const void* d, std::span<const double> ref);

}  // namespace detrace::kernels
