// det-allreduce: kernels::PeerAllReduce as a replay implementation of a recorded AllReduce, over
// nranks GPUs of this process, rank r's captured send buffer on GPU r. Needs no NCCL: the sums
// are fixedOrderReduce's in rank order, so its output must equal rank/gpu's.
#if DETRACE_REPLAY_HAVE_KERNELS

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "detrace/kernels/peer_allreduce.h"
#include "replay_internal.h"

namespace detrace::replay::detail {
namespace {


// The buffers, streams and PeerAllReduce, made on first use and kept for the repeats.
struct PeerWorld {
  std::shared_ptr<const CollectiveProblem> p;
  std::unique_ptr<kernels::PeerAllReduce> peer;
  std::vector<void*> send, recv;
  std::vector<cudaStream_t> streams;

  ~PeerWorld() {
    for (size_t r = 0; r < send.size(); ++r) {
      (void)cudaSetDevice(static_cast<int>(r));
      if (send[r] != nullptr) (void)cudaFree(send[r]);
      if (recv[r] != nullptr) (void)cudaFree(recv[r]);
      if (r < streams.size() && streams[r] != nullptr) (void)cudaStreamDestroy(streams[r]);
    }
    peer.reset();
    (void)cudaSetDevice(0);
  }
  size_t bytes() const { return static_cast<size_t>(p->count * db::dtypeSize(p->dtype)); }
  Status prepare() {
    if (peer) return Status::ok();
    const int n = p->nranks;
    std::vector<int> devices;
    for (int r = 0; r < n; ++r) devices.push_back(r);
    DETRACE_ASSIGN_OR_RETURN(auto made, kernels::PeerAllReduce::create(devices));
    send.assign(static_cast<size_t>(n), nullptr);
    recv.assign(static_cast<size_t>(n), nullptr);
    streams.assign(static_cast<size_t>(n), nullptr);
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<size_t>(r);
      const Bytes& in = p->inputs[i];
      DETRACE_REPLAY_CUDA(cudaSetDevice(r));
      DETRACE_REPLAY_CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
      DETRACE_REPLAY_CUDA(cudaMalloc(&send[i], in.size()));
      DETRACE_REPLAY_CUDA(cudaMalloc(&recv[i], bytes()));
      DETRACE_REPLAY_CUDA(cudaMemcpy(send[i], in.data(), in.size(), cudaMemcpyHostToDevice));
    }
    peer = std::move(made);  // last: a failure above leaves prepare() to run again
    return Status::ok();
  }
  Result<Bytes> run() {
    DETRACE_RETURN_IF_ERROR(prepare());
    const int n = p->nranks;
    for (int r = 0; r < n; ++r) {
      DETRACE_REPLAY_CUDA(cudaSetDevice(r));
      DETRACE_REPLAY_CUDA(cudaMemset(recv[static_cast<size_t>(r)], 0xFF, bytes()));
      DETRACE_REPLAY_CUDA(cudaDeviceSynchronize());
    }
    std::vector<const void*> sends(send.begin(), send.end());
    DETRACE_RETURN_IF_ERROR(peer->run(sends.data(), recv.data(), static_cast<size_t>(p->count),
                                      kernelDType(p->dtype),
                                      kernels::ReduceOrder::kRankOrder, 0, streams.data()));
    for (int r = 0; r < n; ++r) {
      DETRACE_REPLAY_CUDA(cudaSetDevice(r));
      DETRACE_REPLAY_CUDA(cudaStreamSynchronize(streams[static_cast<size_t>(r)]));
    }
    Bytes out(bytes());
    DETRACE_REPLAY_CUDA(cudaSetDevice(p->out_rank));
    DETRACE_REPLAY_CUDA(cudaMemcpy(out.data(), recv[static_cast<size_t>(p->out_rank)], out.size(),
                                     cudaMemcpyDeviceToHost));
    DETRACE_REPLAY_CUDA(cudaSetDevice(0));
    return out;
  }
};

}  // namespace

std::optional<Impl> deterministicAllReduceImpl(std::shared_ptr<const CollectiveProblem> p,
                                               const std::string& unavailable) {
  if (p->op != db::CollOp::kAllReduce) return std::nullopt;
  Impl impl;
  impl.name = "det-allreduce";
  impl.description = fmt::format(
      "kernels' PeerAllReduce over {} local GPU(s): each sums its slice from peer memory in rank "
      "order and stores it into every GPU's output (equals rank/gpu)", p->nranks);
  impl.gpu = true;
  impl.skipped = unavailable;
  if (impl.skipped.empty() && gpuCount() < p->nranks) {
    impl.skipped = fmt::format("needs {} GPUs, this machine has {}", p->nranks, gpuCount());
  }
  auto world = std::make_shared<PeerWorld>();
  world->p = p;
  impl.run = [world]() { return world->run(); };
  return impl;
}

}  // namespace detrace::replay::detail

#endif  // DETRACE_REPLAY_HAVE_KERNELS
