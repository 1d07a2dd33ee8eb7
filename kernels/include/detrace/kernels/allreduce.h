// Deterministic multi-GPU all-reduce (sum) over NCCL, for replaying collectives bit-exactly.
//
// Guarantee: DETERMINISTIC and IDENTICAL ON EVERY RANK. NCCL only moves bytes (all-to-all and
// all-gather do no arithmetic); every sum is the same fixed-order reduction (fixedOrderReduce,
// same order and start on every rank), so every element has the value fixedOrderReduce gives
// over all ranks' inputs, run after run, independent of NCCL's algorithm, protocol or channel
// count. Rank r reduces slice r of the buffer and the slices are all-gathered, so each rank sends
// 2 (n-1)/n of the buffer, as in a ring all-reduce; bench/kernels/bench_allreduce compares its
// bus bandwidth with NCCL's all-reduce.
// Only built when NCCL was found (DETRACE_HAVE_NCCL).
#pragma once

#if defined(DETRACE_HAVE_NCCL)

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "detrace/base/status.h"
#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::kernels {

// Bytes of the workspace deterministicAllReduce needs: count + nranks^2 elements of dtype.
size_t deterministicAllReduceWorkspaceBytes(size_t count, DType dtype, int nranks);

// recv = sum over ranks of send (count elements), in `order` from `start`, on every rank.
// `workspace` is device memory of at least deterministicAllReduceWorkspaceBytes(); recv may
// equal send; neither may overlap the workspace. Enqueued on `stream`; the call
// is collective: every rank of `comm` must make it with the same count, dtype, order and start.
Status deterministicAllReduce(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOrder order, int start, ncclComm_t comm, cudaStream_t stream,
                              void* workspace, size_t workspace_bytes);

}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
