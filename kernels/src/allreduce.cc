// Deterministic all-reduce: ncclAllGather + the fixed-order local reduction (see allreduce.h).
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
  return count * dtypeSize(dtype) * static_cast<size_t>(nranks < 0 ? 0 : nranks);
}

Status deterministicAllReduce(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOrder order, int start, ncclComm_t comm, cudaStream_t stream,
                              void* workspace, size_t workspace_bytes) {
  int nranks = 0;
  DETRACE_NCCL_RETURN_IF_ERROR(ncclCommCount(comm, &nranks));
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
  DETRACE_NCCL_RETURN_IF_ERROR(
      ncclAllGather(send, workspace, count, ncclTypeOf(dtype), comm, stream));
  const void* inputs[kMaxReduceRanks];
  const size_t bytes = count * dtypeSize(dtype);
  for (int r = 0; r < nranks; ++r) inputs[r] = static_cast<const char*>(workspace) + r * bytes;
  return fixedOrderReduce(inputs, nranks, recv, count, dtype, order, start, stream);
}

}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
