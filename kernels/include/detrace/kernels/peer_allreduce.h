// Deterministic all-reduce (sum) across the GPUs of ONE process, over peer memory: for replay and
// benchmarks, where a single process holds every rank.
//
// Guarantee: DETERMINISTIC and IDENTICAL ON EVERY RANK. Rank r sums slice r of every rank's
// buffer with fixedOrderReduce (same order and start for all), reading its peers' memory
// directly, and the reduced slices are then copied to every rank by the copy engines. Every
// element is summed once, by one GPU, in the fixed order: bit-identical to fixedOrderReduce over
// all inputs, and to its CPU twin. Each GPU reads and writes 2 (n-1)/n of the buffer across the
// links, like a ring all-reduce. No NCCL, no host synchronisation: all work is enqueued on the
// callers' per-rank streams, ordered across GPUs with events.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::kernels {

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

 private:
  explicit PeerAllReduce(std::vector<int> devices) : devices_(std::move(devices)) {}
  Status signal(std::vector<cudaEvent_t>& events, const cudaStream_t* streams);

  std::vector<int> devices_;
  std::vector<cudaEvent_t> ready_, reduced_, done_;  // one per rank, on its device
};

}  // namespace detrace::kernels
