// NCCL itself as a replay implementation: the recorded collective run by ncclAllReduce /
// ncclReduceScatter / ncclReduce over nranks GPUs of this machine, one process holding every rank
// (ncclCommInitAll), each GPU fed its rank's captured send buffer. Its algorithm and protocol are
// NCCL's choice here, which need not be the recorded one; with one rank it is a one-rank
// collective. The communicators and buffers are made on first use and kept for the repeats.
// (det-allreduce, kernels' PeerAllReduce across the same GPUs, is in replay_peer.cc.)
#if DETRACE_REPLAY_HAVE_KERNELS

#include <fmt/format.h>

#include "replay_internal.h"

#if defined(DETRACE_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>

#endif

namespace detrace::replay::detail {

#if defined(DETRACE_HAVE_NCCL)
namespace {

Status ncclStatus(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return Status::ok();
  return makeError(ErrorCode::kInternal, "{} failed: {}", call, ncclGetErrorString(r));
}
#define DETRACE_REPLAY_NCCL(call) DETRACE_RETURN_IF_ERROR(ncclStatus((call), #call))

ncclDataType_t ncclType(db::DType t) {
  return t == db::DType::kF32 ? ncclFloat32 : t == db::DType::kF16 ? ncclFloat16 : ncclBfloat16;
}

// Every rank's communicator, send and receive buffer, one GPU each; freed at destruction.
struct NcclWorld {
  std::shared_ptr<const CollectiveProblem> p;
  std::vector<ncclComm_t> comms;
  std::vector<void*> send, recv;

  ~NcclWorld() {
    for (size_t r = 0; r < comms.size(); ++r) {
      (void)cudaSetDevice(static_cast<int>(r));
      if (send[r] != nullptr) (void)cudaFree(send[r]);
      if (recv[r] != nullptr) (void)cudaFree(recv[r]);
      if (comms[r] != nullptr) (void)ncclCommDestroy(comms[r]);
    }
    (void)cudaSetDevice(0);
  }
  size_t recvBytes() const {
    const int64_t n = p->op == db::CollOp::kReduceScatter ? p->count : p->send_count;
    return static_cast<size_t>(n * db::dtypeSize(p->dtype));
  }
  Status prepare() {
    if (!comms.empty()) return Status::ok();
    const int n = p->nranks;
    std::vector<ncclComm_t> made(static_cast<size_t>(n), nullptr);
    DETRACE_REPLAY_NCCL(ncclCommInitAll(made.data(), n, nullptr));
    send.assign(static_cast<size_t>(n), nullptr);
    recv.assign(static_cast<size_t>(n), nullptr);
    for (int r = 0; r < n; ++r) {
      const Bytes& in = p->inputs[static_cast<size_t>(r)];
      DETRACE_REPLAY_CUDA(cudaSetDevice(r));
      DETRACE_REPLAY_CUDA(cudaMalloc(&send[static_cast<size_t>(r)], in.size()));
      DETRACE_REPLAY_CUDA(cudaMalloc(&recv[static_cast<size_t>(r)], recvBytes()));
      DETRACE_REPLAY_CUDA(cudaMemcpy(send[static_cast<size_t>(r)], in.data(), in.size(),
                                       cudaMemcpyHostToDevice));
    }
    comms = made;  // last: a failure above leaves prepare() to run again from scratch
    return Status::ok();
  }
  Result<Bytes> output() {
    Bytes out(static_cast<size_t>(p->count) * static_cast<size_t>(db::dtypeSize(p->dtype)));
    DETRACE_REPLAY_CUDA(cudaSetDevice(p->out_rank));
    DETRACE_REPLAY_CUDA(cudaMemcpy(out.data(), recv[static_cast<size_t>(p->out_rank)],
                                     out.size(), cudaMemcpyDeviceToHost));
    DETRACE_REPLAY_CUDA(cudaSetDevice(0));
    return out;
  }
  Result<Bytes> run() {
    DETRACE_RETURN_IF_ERROR(prepare());
    const int n = p->nranks;
    const auto count = static_cast<size_t>(p->count);
    for (int r = 0; r < n; ++r) {
      DETRACE_REPLAY_CUDA(cudaSetDevice(r));
      DETRACE_REPLAY_CUDA(cudaMemset(recv[static_cast<size_t>(r)], 0xFF, recvBytes()));
    }
    DETRACE_REPLAY_NCCL(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<size_t>(r);
      ncclResult_t res = ncclSuccess;
      switch (p->op) {
        case db::CollOp::kReduceScatter:
          res = ncclReduceScatter(send[i], recv[i], count, ncclType(p->dtype), ncclSum, comms[i],
                                  nullptr);
          break;
        case db::CollOp::kReduce:
          res = ncclReduce(send[i], recv[i], count, ncclType(p->dtype), ncclSum, p->root, comms[i],
                           nullptr);
          break;
        default:
          res = ncclAllReduce(send[i], recv[i], count, ncclType(p->dtype), ncclSum, comms[i],
                              nullptr);
      }
      if (res != ncclSuccess) {
        (void)ncclGroupEnd();
        return ncclStatus(res, "ncclAllReduce/ReduceScatter/Reduce");
      }
    }
    DETRACE_REPLAY_NCCL(ncclGroupEnd());
    for (int r = 0; r < n; ++r) {
      DETRACE_REPLAY_CUDA(cudaSetDevice(r));
      DETRACE_REPLAY_CUDA(cudaDeviceSynchronize());
    }
    return output();
  }
};

}  // namespace
#endif  // DETRACE_HAVE_NCCL

Impl ncclImpl(std::shared_ptr<const CollectiveProblem> p, const std::string& unavailable) {
  Impl impl;
  impl.name = "nccl";
  impl.description = fmt::format("NCCL {} over {} local GPU(s) (NCCL's own algorithm here)",
                                 db::collOpName(p->op), p->nranks);
  impl.gpu = true;
  impl.skipped = unavailable;
#if defined(DETRACE_HAVE_NCCL)
  if (impl.skipped.empty() && gpuCount() < p->nranks) {
    impl.skipped = fmt::format("needs {} GPUs, this machine has {}", p->nranks, gpuCount());
  }
  auto world = std::make_shared<NcclWorld>();
  world->p = p;
  impl.run = [world]() { return world->run(); };
#else
  if (impl.skipped.empty()) impl.skipped = "detrace was built without NCCL";
#endif
  return impl;
}

}  // namespace detrace::replay::detail

#endif  // DETRACE_REPLAY_HAVE_KERNELS
