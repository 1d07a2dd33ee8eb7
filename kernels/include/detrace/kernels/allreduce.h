// Deterministic multi-GPU all-reduce (sum) over NCCL, for replaying collectives bit-exactly.
//
// Guarantee: DETERMINISTIC and IDENTICAL ON EVERY RANK. Each rank all-gathers every rank's input
// (ncclAllGather moves bytes, it does no arithmetic) into a gather buffer and then runs the same
// fixed-order reduction (fixedOrderReduce, same order and start on every rank) locally, so all
// ranks compute the same bits, run after run, independent of NCCL's algorithm, protocol or
// channel count. It costs N x the bytes of a ring all-reduce: a replay tool, not a fast path.
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

// Bytes of the workspace deterministicAllReduce needs: nranks * count elements of dtype.
size_t deterministicAllReduceWorkspaceBytes(size_t count, DType dtype, int nranks);

// recv = sum over ranks of send (count elements), in `order` from `start`, on every rank.
// `workspace` is device memory of at least deterministicAllReduceWorkspaceBytes(); recv may
// equal send. Enqueued on `stream` (must be the stream NCCL work of this call goes to); the call
// is collective: every rank of `comm` must make it with the same count, dtype, order and start.
Status deterministicAllReduce(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOrder order, int start, ncclComm_t comm, cudaStream_t stream,
                              void* workspace, size_t workspace_bytes);

}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
