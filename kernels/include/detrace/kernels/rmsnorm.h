// Batch-invariant RMSNorm: y = x * (1 / sqrt(mean(x^2) + eps)) * w, per row of `hidden` elements,
// optionally fused with a residual add (residual += x first, then the norm of that sum).
//
// Guarantees: DETERMINISTIC and BATCH-INVARIANT. Each row is normalised by one thread block whose
// size and summation order depend on `hidden` alone (rmsNormThreads), never on the number of rows
// or on alignment: a row's output bits do not depend on the other rows, on the batch size, or on
// the run. Accumulation is fp32 with IEEE round-to-nearest operations and no FMA:
//   - thread t (of T = rmsNormThreads(hidden)) owns the 8-element units t, t+T, t+2T, ... and adds
//     x*x for each element of its units in index order, starting from 0;
//   - each warp combines its 32 partials with a butterfly (xor 16, 8, 4, 2, 1);
//   - the warp totals are added in warp order: ((w0 + w1) + w2) + ...;
//   - inv = 1 / sqrt(total / hidden + eps), y = round((x * inv) * w).
// rmsNormCpu() performs exactly these operations and is bit-identical to the GPU.
// With the residual: s = round(x + residual) is stored into residual and normalised in x's place.
// bf16 and fp16 round to nearest even. These functions run in detrace's replay process (runtime API).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "detrace/base/status.h"
#include "detrace/kernels/dtype.h"

namespace detrace::kernels {

inline constexpr int64_t kRmsNormMaxHidden = int64_t{1} << 20;

// Threads of the block that normalises one row: a function of `hidden` only.
int rmsNormThreads(int64_t hidden);

// y[r, :] = rmsnorm(x[r, :]) * w for `rows` contiguous rows (device pointers, any alignment).
Status rmsNorm(const void* x, const void* weight, void* y, int64_t rows, int64_t hidden, float eps,
               DType dtype, cudaStream_t stream);

// residual[r, :] = round(x[r, :] + residual[r, :]); y[r, :] = rmsnorm(residual[r, :]) * w.
Status rmsNormAddResidual(const void* x, void* residual, const void* weight, void* y, int64_t rows,
                          int64_t hidden, float eps, DType dtype, cudaStream_t stream);

// CPU twins on host buffers, bit-identical to the GPU functions above.
Status rmsNormCpu(const void* x, const void* weight, void* y, int64_t rows, int64_t hidden,
                  float eps, DType dtype);
Status rmsNormAddResidualCpu(const void* x, void* residual, const void* weight, void* y,
                             int64_t rows, int64_t hidden, float eps, DType dtype);

// PLANTED DEFECT, for testing detrace's detectors; never used by default. Deterministic run to run
// but NOT batch-invariant: with fewer than 64 rows it is rmsNorm(); from 64 rows on it switches to
// one warp per row with each lane summing a contiguous slice and a shfl_down tree, a different
// summation order, so a row's output bits change with the number of rows.
Status planted_batchVariantRmsNorm(const void* x, const void* weight, void* y, int64_t rows,
                                   int64_t hidden, float eps, DType dtype, cudaStream_t stream);

namespace detail {
Status checkRmsNormArgs(const void* x, const void* weight, const void* y, int64_t rows,
                        int64_t hidden);
}  // namespace detail

}  // namespace detrace::kernels
