// Deterministic multi-GPU all-reduce (sum) over NCCL, for replaying collectives bit-exactly.
//
// Guarantee: DETERMINISTIC and IDENTICAL ON EVERY RANK. NCCL only moves bytes (all-to-all and
// all-gather do no arithmetic); every sum is the same fixed-order reduction (fixedOrderReduce,
// same order and start on every rank), so every element has the value fixedOrderReduce gives
// over all ranks' inputs, run after run, independent of NCCL's algorithm, protocol or channel
// count. The bytes move as AllReduceAlgo says; bench/kernels/bench_allreduce compares its bus
// bandwidth with NCCL's all-reduce.
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

// How the bytes move (the sums, and so the result, are the same either way):
//   kSliced  rank r receives slice r of every peer's buffer (grouped send/recv), reduces it, and
//            the reduced slices are all-gathered in place: each rank sends 2 (n-1)/n of the
//            buffer, like a ring all-reduce;
//   kGather  all-gather of whole buffers, every rank reduces all of it: each rank sends (n-1)
//            buffers, in one NCCL call instead of two;
//   kAuto    kGather while the bytes gathered from the peers are at most 4 MiB, kSliced above
//            (bench/kernels/bench_allreduce measured both on 2 H200s).
enum class AllReduceAlgo { kAuto, kSliced, kGather };

// Bytes of the workspace deterministicAllReduce needs with `algo` (kAuto: the one it picks for
// this count, dtype and nranks).
size_t deterministicAllReduceWorkspaceBytes(size_t count, DType dtype, int nranks,
                                            AllReduceAlgo algo = AllReduceAlgo::kAuto);

// recv = sum over ranks of send (count elements), in `order` from `start`, on every rank.
// `workspace` is device memory of at least deterministicAllReduceWorkspaceBytes(); recv may
// equal send; neither may overlap the workspace. Enqueued on `stream`; the call
// is collective: every rank of `comm` must make it with the same count, dtype, order and start.
Status deterministicAllReduce(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOrder order, int start, ncclComm_t comm, cudaStream_t stream,
                              void* workspace, size_t workspace_bytes,
                              AllReduceAlgo algo = AllReduceAlgo::kAuto);

}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
