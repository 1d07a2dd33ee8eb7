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

namespace {
// One NCCL call beats two while latency dominates: kGather up to 4 MiB gathered from the peers.
constexpr size_t kGatherMaxBytes = size_t{4} << 20;

AllReduceAlgo resolve(AllReduceAlgo algo, size_t count, DType dtype, int nranks) {
  if (algo != AllReduceAlgo::kAuto) return algo;
  const size_t peers = static_cast<size_t>(nranks > 1 ? nranks - 1 : 1);
  return count * dtypeSize(dtype) * peers <= kGatherMaxBytes ? AllReduceAlgo::kGather
                                                             : AllReduceAlgo::kSliced;
}
}  // namespace

size_t deterministicAllReduceWorkspaceBytes(size_t count, DType dtype, int nranks,
                                            AllReduceAlgo algo) {
  const size_t n = static_cast<size_t>(nranks < 1 ? 1 : nranks);
  const size_t sliced = (count + n * n) * dtypeSize(dtype);  // exchanged slices + gathered tail
  const size_t gather = count * n * dtypeSize(dtype);         // every rank's whole buffer
  switch (resolve(algo, count, dtype, nranks)) {
    case AllReduceAlgo::kGather: return gather;
    default: return sliced;
  }
}

namespace {

// kGather: ws[q] = rank q's buffer (all-gather), then the fixed-order sum of all of it.
Status gatherReduce(const char* in, char* out, size_t count, DType dtype, ReduceOrder order,
                    int start, ncclComm_t comm, cudaStream_t stream, char* ws, int nranks) {
  const size_t bytes = count * dtypeSize(dtype);
  DETRACE_NCCL_RETURN_IF_ERROR(ncclAllGather(in, ws, count, ncclTypeOf(dtype), comm, stream));
  const void* inputs[kMaxReduceRanks];
  for (int q = 0; q < nranks; ++q) inputs[q] = ws + static_cast<size_t>(q) * bytes;
  return fixedOrderReduce(inputs, nranks, out, count, dtype, order, start, stream);
}

// kSliced, three steps on `stream`:
//   1. grouped ncclSend/ncclRecv with every peer: rank r receives slice r of each peer's send
//      buffer (ws[q] = rank q's; its own slice is read where it is, or copied to ws[r] when
//      recv == send, since step 2 writes there);
//   2. fixedOrderReduce of those n slices into recv's slice r (the same order on every rank);
//   3. ncclAllGather, in place: every rank gets every reduced slice.
// The count % n elements left over are all-gathered whole (n-1 elements from each rank at most)
// and reduced on every rank alike. Steps 1 and the tail's gather read `send` before steps 2 and 3
// write `recv`.
Status slicedReduce(const char* in, char* out, size_t count, DType dtype, ReduceOrder order,
                    int start, ncclComm_t comm, cudaStream_t stream, char* ws, int nranks,
                    int rank) {
  const size_t n = static_cast<size_t>(nranks), esize = dtypeSize(dtype);
  const size_t slice = count / n, tail = count % n, main = slice * n, bytes = slice * esize;
  const auto r = static_cast<size_t>(rank);
  const ncclDataType_t type = ncclTypeOf(dtype);
  char* tail_ws = ws + main * esize;
  const bool in_place = in == out;
  if (slice > 0) {
    DETRACE_NCCL_RETURN_IF_ERROR(ncclGroupStart());
    for (size_t q = 0; q < n; ++q) {
      if (q == r) continue;
      const int peer = static_cast<int>(q);
      ncclResult_t sent = ncclSend(in + q * bytes, slice, type, peer, comm, stream);
      ncclResult_t got = sent == ncclSuccess ? ncclRecv(ws + q * bytes, slice, type, peer, comm, stream)
                                             : sent;
      if (got != ncclSuccess) {
        (void)ncclGroupEnd();
        return ncclError(got, "ncclSend/ncclRecv");
      }
    }
    DETRACE_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
    if (in_place) {
      const cudaError_t e = cudaMemcpyAsync(ws + r * bytes, in + r * bytes, bytes,
                                            cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess) {
        return makeError(ErrorCode::kInternal, "cudaMemcpyAsync failed: {}", cudaGetErrorString(e));
      }
    }
  }
  if (tail > 0) {
    DETRACE_NCCL_RETURN_IF_ERROR(ncclAllGather(in + main * esize, tail_ws, tail, type, comm, stream));
  }
  const void* inputs[kMaxReduceRanks];
  char* mine = out + r * bytes;
  if (slice > 0) {
    for (size_t q = 0; q < n; ++q) inputs[q] = q == r && !in_place ? in + r * bytes : ws + q * bytes;
    DETRACE_RETURN_IF_ERROR(fixedOrderReduce(inputs, nranks, mine, slice, dtype, order, start, stream));
  }
  if (tail > 0) {
    for (size_t q = 0; q < n; ++q) inputs[q] = tail_ws + q * tail * esize;
    DETRACE_RETURN_IF_ERROR(
        fixedOrderReduce(inputs, nranks, out + main * esize, tail, dtype, order, start, stream));
  }
  if (slice > 0) DETRACE_NCCL_RETURN_IF_ERROR(ncclAllGather(mine, out, slice, type, comm, stream));
  return Status::ok();
}

}  // namespace

Status deterministicAllReduce(const void* send, void* recv, size_t count, DType dtype,
                              ReduceOrder order, int start, ncclComm_t comm, cudaStream_t stream,
                              void* workspace, size_t workspace_bytes, AllReduceAlgo algo) {
  int nranks = 0, rank = 0;
  DETRACE_NCCL_RETURN_IF_ERROR(ncclCommCount(comm, &nranks));
  DETRACE_NCCL_RETURN_IF_ERROR(ncclCommUserRank(comm, &rank));
  if (nranks > kMaxReduceRanks) {
    return makeError(ErrorCode::kInvalidArgument,
                     "deterministicAllReduce supports up to {} ranks, the communicator has {}",
                     kMaxReduceRanks, nranks);
  }
  algo = resolve(algo, count, dtype, nranks);
  const size_t need = deterministicAllReduceWorkspaceBytes(count, dtype, nranks, algo);
  if (workspace == nullptr || workspace_bytes < need) {
    return makeError(ErrorCode::kInvalidArgument,
                     "deterministicAllReduce needs a workspace of {} bytes, got {}", need,
                     workspace == nullptr ? 0 : workspace_bytes);
  }
  if (count == 0) return Status::ok();
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  auto* ws = static_cast<char*>(workspace);
  if (algo == AllReduceAlgo::kGather) {
    return gatherReduce(in, out, count, dtype, order, start, comm, stream, ws, nranks);
  }
  return slicedReduce(in, out, count, dtype, order, start, comm, stream, ws, nranks, rank);
}

}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
