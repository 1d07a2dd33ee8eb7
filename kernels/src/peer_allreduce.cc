// PeerAllReduce (peer_allreduce.h): the fused kernel (peer_reduce.h) on distinct GPUs, else
// reduce-scatter by direct peer loads and all-gather by peer copies.
#include "detrace/kernels/peer_allreduce.h"

#include <cstdlib>
#include <cstring>
#include <set>

#include "cuda_status.h"
#include "peer_reduce.h"

#define PEER_CUDA(call) DETRACE_CUDA_RETURN_IF_ERROR(call)

namespace detrace::kernels {
namespace {

bool copiesForced() {
  const char* e = std::getenv("DETRACE_PEER_MODE");
  return e != nullptr && std::strcmp(e, "copies") == 0;
}

}  // namespace

Result<std::unique_ptr<PeerAllReduce>> PeerAllReduce::create(std::vector<int> devices) {
  const int n = static_cast<int>(devices.size());
  if (n < 1 || n > kMaxReduceRanks) {
    return makeError(ErrorCode::kInvalidArgument, "PeerAllReduce takes 1 to {} devices, got {}",
                     kMaxReduceRanks, n);
  }
  std::unique_ptr<PeerAllReduce> p(new PeerAllReduce(devices));
  const bool distinct = std::set<int>(devices.begin(), devices.end()).size() == devices.size();
  p->fused_ = distinct && n <= detail::kMaxPeerRanks && !copiesForced();
  for (int r = 0; r < n; ++r) {
    PEER_CUDA(cudaSetDevice(devices[static_cast<size_t>(r)]));
    for (int q = 0; q < n; ++q) {
      if (q == r || devices[static_cast<size_t>(q)] == devices[static_cast<size_t>(r)]) continue;
      int can = 0;
      PEER_CUDA(cudaDeviceCanAccessPeer(&can, devices[static_cast<size_t>(r)], devices[static_cast<size_t>(q)]));
      if (!can) {
        return makeError(ErrorCode::kUnavailable, "GPU {} cannot access GPU {}'s memory (no peer access)",
                         devices[static_cast<size_t>(r)], devices[static_cast<size_t>(q)]);
      }
      const cudaError_t e = cudaDeviceEnablePeerAccess(devices[static_cast<size_t>(q)], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // clear it
      } else {
        PEER_CUDA(e);
      }
    }
    if (p->fused_) {
      void* flags = nullptr;
      PEER_CUDA(cudaMalloc(&flags, sizeof(detail::PeerFlags)));
      p->flags_.push_back(static_cast<detail::PeerFlags*>(flags));
      PEER_CUDA(cudaMemset(flags, 0, sizeof(detail::PeerFlags)));
      continue;
    }
    for (auto* events : {&p->ready_, &p->reduced_, &p->done_}) {
      cudaEvent_t ev = nullptr;
      PEER_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      events->push_back(ev);
    }
  }
  PEER_CUDA(cudaSetDevice(devices[0]));
  return p;
}

PeerAllReduce::~PeerAllReduce() {
  for (size_t r = 0; r < flags_.size(); ++r) {  // cudaFree waits for the kernels using them
    (void)cudaSetDevice(devices_[r]);
    (void)cudaFree(flags_[r]);
  }
  for (size_t r = 0; r < ready_.size(); ++r) {
    (void)cudaSetDevice(devices_[r]);
    (void)cudaEventDestroy(ready_[r]);
    if (r < reduced_.size()) (void)cudaEventDestroy(reduced_[r]);
    if (r < done_.size()) (void)cudaEventDestroy(done_[r]);
  }
}

// Every rank records events[r] on its stream; then every stream waits for all the others'.
Status PeerAllReduce::signal(std::vector<cudaEvent_t>& events, const cudaStream_t* streams) {
  const size_t n = devices_.size();
  for (size_t r = 0; r < n; ++r) {
    PEER_CUDA(cudaSetDevice(devices_[r]));
    PEER_CUDA(cudaEventRecord(events[r], streams[r]));
  }
  for (size_t r = 0; r < n; ++r) {
    PEER_CUDA(cudaSetDevice(devices_[r]));
    for (size_t q = 0; q < n; ++q) {
      if (q != r) PEER_CUDA(cudaStreamWaitEvent(streams[r], events[q], 0));
    }
  }
  return Status::ok();
}

Status PeerAllReduce::run(const void* const* sends, void* const* recvs, size_t count, DType dtype,
                          ReduceOrder order, int start, const cudaStream_t* streams) {
  const size_t n = devices_.size();
  for (size_t r = 0; r < n; ++r) {
    for (size_t q = 0; q < n; ++q) {
      if (recvs[r] == sends[q]) {
        return makeError(ErrorCode::kInvalidArgument,
                         "PeerAllReduce: rank {}'s output is rank {}'s input (in place is not "
                         "supported)", r, q);
      }
    }
  }
  if (count == 0) return Status::ok();
  if (!fused_) return runCopies(sends, recvs, count, dtype, order, start, streams);
  DETRACE_RETURN_IF_ERROR(detail::checkReduceArgs(sends, static_cast<int>(n), recvs[0], order, start));
  if (++epoch_ == 0) epoch_ = 1;  // 0 is the flags' initial value
  const detail::PeerLaunch launch{devices_.data(), sends, recvs, flags_.data(), streams,
                                  static_cast<int>(n), count, dtype, order, start, epoch_};
  const Status s = detail::launchPeerAllReduce(launch);
  PEER_CUDA(cudaSetDevice(devices_[0]));
  return s;
}

Status PeerAllReduce::runCopies(const void* const* sends, void* const* recvs, size_t count,
                                DType dtype, ReduceOrder order, int start,
                                const cudaStream_t* streams) {
  const size_t n = devices_.size();
  const size_t esize = dtypeSize(dtype), slice = count / n, tail = count % n, bytes = slice * esize;
  const size_t main = slice * n;
  DETRACE_RETURN_IF_ERROR(signal(ready_, streams));  // every input is written
  const void* inputs[kMaxReduceRanks];
  for (size_t r = 0; r < n; ++r) {
    PEER_CUDA(cudaSetDevice(devices_[r]));
    char* out = static_cast<char*>(recvs[r]);
    if (slice > 0) {
      for (size_t q = 0; q < n; ++q) inputs[q] = static_cast<const char*>(sends[q]) + r * bytes;
      DETRACE_RETURN_IF_ERROR(fixedOrderReduce(inputs, static_cast<int>(n), out + r * bytes, slice,
                                               dtype, order, start, streams[r]));
    }
    if (tail > 0) {  // a few elements: every rank sums them itself
      for (size_t q = 0; q < n; ++q) inputs[q] = static_cast<const char*>(sends[q]) + main * esize;
      DETRACE_RETURN_IF_ERROR(fixedOrderReduce(inputs, static_cast<int>(n), out + main * esize,
                                               tail, dtype, order, start, streams[r]));
    }
  }
  DETRACE_RETURN_IF_ERROR(signal(reduced_, streams));  // every slice is reduced
  if (slice > 0) {
    for (size_t r = 0; r < n; ++r) {
      PEER_CUDA(cudaSetDevice(devices_[r]));
      char* out = static_cast<char*>(recvs[r]);
      for (size_t q = 0; q < n; ++q) {
        if (q == r) continue;
        PEER_CUDA(cudaMemcpyPeerAsync(out + q * bytes, devices_[r],
                                      static_cast<const char*>(recvs[q]) + q * bytes, devices_[q],
                                      bytes, streams[r]));
      }
    }
  }
  DETRACE_RETURN_IF_ERROR(signal(done_, streams));  // nobody reads a buffer any more
  PEER_CUDA(cudaSetDevice(devices_[0]));
  return Status::ok();
}

}  // namespace detrace::kernels
