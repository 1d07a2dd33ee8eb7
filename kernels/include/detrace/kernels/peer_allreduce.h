// Deterministic all-reduce (sum) across the GPUs of ONE process, over peer memory: for replay and
// benchmarks, where a single process holds every rank.
//
// Guarantee: DETERMINISTIC and IDENTICAL ON EVERY RANK. Rank r sums slice r of every rank's
// buffer in the fixed order (same order and start for all, the adds of fixedOrderReduce), reading
// its peers' memory directly, and every rank gets the reduced slices. Every element is summed
// once, by one GPU, in the fixed order: bit-identical to fixedOrderReduce over all inputs, and to
// its CPU twin. Each GPU reads and writes (n-1)/n of the buffer across the links each way, like a
// ring all-reduce. No NCCL, no host synchronisation: all work is enqueued on the callers'
// per-rank streams.
//
// Two ways, chosen at create():
// - fused (ranks on distinct GPUs, at most 8): one kernel per GPU sums its slice and stores it
//   straight into every rank's output; the GPUs meet through flags in each other's memory
//   (kernels/src/peer_reduce.h), not through events.
// - copies (ranks sharing a GPU, or more than 8): fixedOrderReduce per slice, then the copy
//   engines gather the slices; the streams are ordered across GPUs with events.
// DETRACE_PEER_MODE=copies forces the second (read at create(); for measuring).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::kernels {

namespace detail {
struct PeerFlags;
}

class PeerAllReduce {
 public:
  // For ranks on `devices` (rank r on devices[r], at most kMaxReduceRanks): enables peer access
  // between every pair (it must be possible) and makes the events. Leaves device devices[0]
  // current.
  static Result<std::unique_ptr<PeerAllReduce>> create(std::vector<int> devices);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  // recvs[r] = sum over ranks q of sends[q] (count elements), for every rank r, enqueued on
  // streams[r] (device devices[r]). sends and recvs are device pointers on each rank's device;
  // recvs[r] may alias no send buffer. Work enqueued on any stream afterwards runs after every
  // rank's part of this call.
  Status run(const void* const* sends, void* const* recvs, size_t count, DType dtype,
             ReduceOrder order, int start, const cudaStream_t* streams);

  int ranks() const { return static_cast<int>(devices_.size()); }
  bool fused() const { return fused_; }

 private:
  explicit PeerAllReduce(std::vector<int> devices) : devices_(std::move(devices)) {}
  Status signal(std::vector<cudaEvent_t>& events, const cudaStream_t* streams);
  Status runCopies(const void* const* sends, void* const* recvs, size_t count, DType dtype,
                   ReduceOrder order, int start, const cudaStream_t* streams);

  std::vector<int> devices_;
  bool fused_ = false;
  uint32_t epoch_ = 0;                       // fused: the last call's number
  std::vector<detail::PeerFlags*> flags_;    // fused: one per rank, on its device
  std::vector<cudaEvent_t> ready_, reduced_, done_;  // copies: one per rank, on its device
};

}  // namespace detrace::kernels
