// Fixed-order reduction of N per-rank inputs on one GPU: replays an all-reduce or reduce-scatter
// from the per-rank inputs captured in a trace, with a summation order the caller chooses.
//
// Guarantee: DETERMINISTIC. out[i] depends only on (inputs[*][i], order, start): every element is
// summed in fp32 in exactly the order given by the ReduceOrder, with IEEE round-to-nearest adds
// (no FMA, no reassociation), then rounded to the input dtype (round to nearest even). The result
// is bit-identical across runs, grid sizes, GPUs and alignments, and to fixedOrderReduceCpu().
// It is also element-wise, hence trivially invariant to how many elements are reduced at once.
//
// These functions run in detrace's own replay process and use the CUDA runtime API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "detrace/base/status.h"
#include "detrace/kernels/dtype.h"

namespace detrace::kernels {

inline constexpr int kMaxReduceRanks = 128;

// The order in which the N inputs of each element are added. With leaves l_0 .. l_{N-1}:
//   kRankOrder: leaves are ranks 0, 1, ..., N-1;       sum = ((l_0 + l_1) + l_2) + ...
//   kReversed:  leaves are ranks N-1, ..., 0;          summed left to right as above
//   kRing:      leaves are ranks s, s+1, ..., wrapping  (s = start), summed left to right
//   kTree:      leaves are ranks s, s+1, ..., wrapping, summed as a pairwise tree:
//               ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)); when N is not a power of two,
//               each level pairs neighbours left to right and an unpaired last one moves up as is,
//               e.g. N = 3: (l0 + l1) + l2; N = 6: ((l0 + l1) + (l2 + l3)) + (l4 + l5).
// `start` only matters for kRing and kTree (kTree with start 0 is the plain rank-order tree).
enum class ReduceOrder : uint8_t { kRankOrder, kReversed, kRing, kTree };

const char* reduceOrderName(ReduceOrder order);

// Writes the N leaf ranks of `order` into leaves[0..N). N in [1, kMaxReduceRanks], start in [0, N).
void reduceLeafOrder(ReduceOrder order, int nranks, int start, int* leaves);

// Reduces `count` elements of `nranks` device buffers (inputs: a host array of N device
// pointers, any alignment; 16-byte aligned ones take the vectorised path) into `out` (device, may
// alias none of the inputs). Enqueued on `stream`; no synchronisation.
Status fixedOrderReduce(const void* const* inputs, int nranks, void* out, size_t count, DType dtype,
                        ReduceOrder order, int start, cudaStream_t stream);

// CPU twin of fixedOrderReduce on host buffers: the same fp32 operations in the same order.
Status fixedOrderReduceCpu(const void* const* inputs, int nranks, void* out, size_t count,
                           DType dtype, ReduceOrder order, int start);

// PLANTED DEFECT, for testing detrace's detectors; never used by default. Sums the inputs into
// `out` with atomicAdd in arrival order (fp32: float atomics; bf16/fp16: packed bf16x2/half2
// atomics, rounding after each add), like a one-shot custom all-reduce racing on its peers'
// buffers: neighbouring blocks add different ranks of the same elements concurrently, so the
// order, and therefore the rounded result, changes from run to run. NOT deterministic. `out` is
// zeroed first (cudaMemsetAsync on `stream`).
Status planted_racyReduce(const void* const* inputs, int nranks, void* out, size_t count,
                          DType dtype, cudaStream_t stream);

namespace detail {
// Shared by the GPU launcher and the CPU twin: validates arguments common to both.
Status checkReduceArgs(const void* const* inputs, int nranks, const void* out, ReduceOrder order,
                       int start);
}  // namespace detail

}  // namespace detrace::kernels
