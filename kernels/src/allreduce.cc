// Deterministic all-reduce: all-to-all, a fixed-order local reduction, all-gather (allreduce.h).
#include "detrace/kernels/allreduce.h"

#if defined(DETRACE_HAVE_NCCL)

#include <cstdint>

namespace detrace::kernels {
namespace {

Status ncclError(ncclResult_t r, const char* call) {
  return makeError(r == ncclInvalidArgument || r == ncclInvalidUsage ? ErrorCode::kInvalidArgument
                                                                     : ErrorCode::kInternal,
                   "{} failed: {}", call, ncclGetErrorString(r));
}

#define DETRACE_NCCL_RETURN_IF_ERROR(call)                         \
  do {                                                             \
    const ncclResult_t detrace_nccl_ = (call);                     \
    if (detrace_nccl_ != ncclSuccess) return ncclError(detrace_nccl_, #call); \
  } while (0)

ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

}  // namespace

size_t deterministicAllReduceWorkspaceBytes(size_t count, DType dtype, int nranks) {
  const size_t n = static_cast<size_t>(nranks < 1 ? 1 : nranks);
  return (count + n * n) * dtypeSize(dtype);  // the exchanged slices + the gathered tail
}

// Three steps on `stream`, every byte moved by NCCL without arithmetic:
//   1. ncclAlltoAll: rank r receives slice r of every rank's send buffer (ws[q] = rank q's);
//   2. fixedOrderReduce of those n slices into recv's slice r (the same order on every rank);
//   3. ncclAllGather, in place: every rank gets every reduced slice.
// The bytes each rank sends, 2 (n-1)/n of the buffer, are a ring all-reduce's. The count % n
// elements left over are all-gathered whole (n-1 elements from each rank at most) and reduced
// on every rank alike. Steps 1 and the tail's gather read `send` before steps 2 and 3 write
// `recv`, so recv may equal send.
Status deterministicAllReduce(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOrder order, int start, ncclComm_t comm, cudaStream_t stream,
                              void* workspace, size_t workspace_bytes) {
  int nranks = 0, rank = 0;
  DETRACE_NCCL_RETURN_IF_ERROR(ncclCommCount(comm, &nranks));
  DETRACE_NCCL_RETURN_IF_ERROR(ncclCommUserRank(comm, &rank));
  if (nranks > kMaxReduceRanks) {
    return makeError(ErrorCode::kInvalidArgument,
                     "deterministicAllReduce supports up to {} ranks, the communicator has {}",
                     kMaxReduceRanks, nranks);
  }
  const size_t need = deterministicAllReduceWorkspaceBytes(count, dtype, nranks);
  if (workspace == nullptr || workspace_bytes < need) {
    return makeError(ErrorCode::kInvalidArgument,
                     "deterministicAllReduce needs a workspace of {} bytes, got {}", need,
                     workspace == nullptr ? 0 : workspace_bytes);
  }
  if (count == 0) return Status::ok();
  const size_t n = static_cast<size_t>(nranks), esize = dtypeSize(dtype);
  const size_t slice = count / n, tail = count % n, main = slice * n;
  const ncclDataType_t type = ncclTypeOf(dtype);
  auto* ws = static_cast<char*>(workspace);
  char* tail_ws = ws + main * esize;
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  if (slice > 0) DETRACE_NCCL_RETURN_IF_ERROR(ncclAlltoAll(in, ws, slice, type, comm, stream));
  if (tail > 0) {
    DETRACE_NCCL_RETURN_IF_ERROR(ncclAllGather(in + main * esize, tail_ws, tail, type, comm, stream));
  }
  const void* inputs[kMaxReduceRanks];
  if (slice > 0) {
    for (size_t q = 0; q < n; ++q) inputs[q] = ws + q * slice * esize;
    DETRACE_RETURN_IF_ERROR(fixedOrderReduce(inputs, nranks, out + rank * slice * esize, slice,
                                             dtype, order, start, stream));
  }
  if (tail > 0) {
    for (size_t q = 0; q < n; ++q) inputs[q] = tail_ws + q * tail * esize;
    DETRACE_RETURN_IF_ERROR(
        fixedOrderReduce(inputs, nranks, out + main * esize, tail, dtype, order, start, stream));
  }
  if (slice > 0) {
    DETRACE_NCCL_RETURN_IF_ERROR(
        ncclAllGather(out + rank * slice * esize, out, slice, type, comm, stream));
  }
  return Status::ok();
}

}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
