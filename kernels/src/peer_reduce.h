// The fused peer all-reduce kernel behind PeerAllReduce (peer_allreduce.h) for ranks on distinct
// GPUs: rank r loads slice r of every rank's input from peer memory, sums it in the fixed order
// (reduce_device.cuh, the same adds as fixedOrderReduce) and stores the result into every rank's
// output, all in one kernel per GPU. The GPUs meet through flags in each other's memory instead
// of events: block b of every rank waits, at the start, until block b of every rank has started
// (so every input is written and no rank still reads its previous output) and, at the end, until
// block b of every rank has stored its part (so this rank's output is complete and nobody still
// reads its input once its kernel ends).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "detrace/base/status.h"
#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::kernels::detail {

inline constexpr int kMaxPeerRanks = 8;     // ranks of the fused path (more: the copy path)
inline constexpr int kMaxPeerBlocks = 1024;  // blocks per GPU (the grid is at most this)

// One per GPU, zeroed once: slot[phase][block][rank] holds the last call (epoch) in which `rank`'s
// block `block` reached `phase` (0 start, 1 end). Written by the peers, read by the owner.
struct PeerFlags {
  uint32_t slot[2][kMaxPeerBlocks][kMaxPeerRanks];
};

struct PeerLaunch {
  const int* devices;          // rank r on devices[r], all distinct
  const void* const* sends;    // rank order, each on its rank's device
  void* const* recvs;          // rank order
  PeerFlags* const* flags;     // rank order, each on its rank's device
  const cudaStream_t* streams;  // rank order
  int nranks;                  // 1 .. kMaxPeerRanks
  size_t count;
  DType dtype;
  ReduceOrder order;
  int start;
  uint32_t epoch;  // this call's number, the same for every rank, never 0, one more than the last
};

// Enqueues the fused kernel on every rank's stream (same grid everywhere). Leaves the current
// device unspecified. DETRACE_PEER_LOADS=16 doubles the loads each thread keeps in flight (default
// 8; read once; for measuring).
Status launchPeerAllReduce(const PeerLaunch& a);

}  // namespace detrace::kernels::detail
