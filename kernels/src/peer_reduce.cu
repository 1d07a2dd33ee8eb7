// The fused peer all-reduce kernel (peer_reduce.h).
//
// Work split: the 16-byte vectors of the buffer are cut into nranks contiguous slices, rank r
// takes slice r; the scalar tail (and everything, when a pointer is not 16-byte aligned) belongs
// to the last rank. A thread loads one vector of each rank (kN x kVecs loads in flight), sums them
// in fixed order and stores the packed result into every rank's output: across the links each GPU
// reads and writes (n-1)/n of the buffer, like a ring all-reduce, with no second phase.
//
// The flags: thread q < nranks of block b stores the call's epoch into rank q's
// slot[phase][b][me] (release, system scope), then spins until its own slot[phase][b][q] reaches
// the epoch (acquire). The end meeting follows a __syncthreads, so the release covers the
// block's stores. A peer that never arrives (its launch failed) would hang the GPU: after about
// 2^35 cycles (~15 s) the kernel prints which rank it waited for and traps.
#include <cuda/atomic>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cuda_status.h"
#include "peer_reduce.h"
#include "reduce_device.cuh"

namespace detrace::kernels::detail {
namespace {

constexpr int kThreads = 256;
constexpr long long kSpinLimitCycles = 1ll << 35;

struct PeerParams {
  const void* src[kMaxPeerRanks];   // leaf order
  void* out[kMaxPeerRanks];         // rank order
  PeerFlags* flags[kMaxPeerRanks];  // rank order
  uint64_t vbegin, vend;            // this rank's vectors
  uint64_t ebegin, eend;            // this rank's scalar elements
  uint32_t epoch;
  int nranks, rank;
};

using SysFlag = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;

__device__ __forceinline__ void meet(const PeerParams& p, int phase) {
  const int q = static_cast<int>(threadIdx.x);
  if (q < p.nranks) {
    SysFlag(p.flags[q]->slot[phase][blockIdx.x][p.rank]).store(p.epoch, cuda::memory_order_release);
    SysFlag mine(p.flags[p.rank]->slot[phase][blockIdx.x][q]);
    const long long t0 = clock64();
    while (static_cast<int32_t>(mine.load(cuda::memory_order_acquire) - p.epoch) < 0) {
      if (clock64() - t0 > kSpinLimitCycles) {
        printf("detrace PeerAllReduce: rank %d (block %u) waited ~15 s for rank %d to %s call %u; "
               "a launch on that GPU failed or its stream is blocked\n",
               p.rank, blockIdx.x, q, phase == 0 ? "start" : "finish", p.epoch);
        __trap();
      }
    }
  }
  __syncthreads();
}

template <typename T, int V, int kN>
__device__ __forceinline__ void storeAll(const PeerParams& p, uint64_t elem, const FVec<V>& acc) {
  if constexpr (kN > 0) {
#pragma unroll
    for (int q = 0; q < kN; ++q) storePack<T, V>(p.out[q], elem, acc);
  } else {
    for (int q = 0; q < p.nranks; ++q) storePack<T, V>(p.out[q], elem, acc);
  }
}

// kN: the rank count at compile time (2, 4, 8), or 0 for any (run-time loop, one vector at once).
template <typename T, int kN, bool kTree, int kVecs>
__global__ void __launch_bounds__(kThreads) peerAllReduceKernel(const __grid_constant__ PeerParams p) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kLevels = kTree ? treeLevelsFor(kMaxPeerRanks) : 0;
  meet(p, 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t v0 = p.vbegin + tid; v0 < p.vend; v0 += stride * kVecs) {
    uint64_t elem[kVecs];
    bool valid[kVecs];
    vectorGroup<V, kVecs>(v0, stride, p.vend, elem, valid);
    FVec<V> acc[kVecs];
    if constexpr (kN > 0) {
      reduceGroupN<T, V, kN, kTree, kVecs>(p.src, elem, valid, acc);
    } else {
      reduceGroup<T, V, kLevels, kVecs>(p.src, p.nranks, elem, valid, acc);
    }
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      if (valid[u]) storeAll<T, V, kN>(p, elem[u], acc[u]);
    }
  }
  for (uint64_t e = p.ebegin + tid; e < p.eend; e += stride) {
    const uint64_t elem[1] = {e};
    const bool valid[1] = {true};
    FVec<1> acc[1];
    reduceGroup<T, 1, kLevels, 1>(p.src, p.nranks, elem, valid, acc);
    storeAll<T, 1, kN>(p, e, acc[0]);
  }
  __syncthreads();
  meet(p, 1);
}

// Loads each thread keeps in flight (kN x kVecs). Measured on 4 H200s (bench_allreduce, bf16,
// % of NCCL's bus bandwidth, one run each): 8 loads 108 / 99 / 96 % at 16 / 32 / 64 MiB, 16 loads
// 95 / 85 / 84 % (more registers, half the resident blocks). DETRACE_PEER_LOADS=16 picks the
// other (read once; for measuring).
int peerLoads() {
  static const int loads = [] {
    const char* e = std::getenv("DETRACE_PEER_LOADS");
    return e != nullptr && std::atoi(e) == 16 ? 16 : 8;
  }();
  return loads;
}

// Fills every rank's parameters except `rank`, `vbegin/vend`, `ebegin/eend`.
PeerParams commonParams(const PeerLaunch& a) {
  PeerParams p{};
  int leaves[kMaxReduceRanks];
  reduceLeafOrder(a.order, a.nranks, a.start, leaves);
  for (int k = 0; k < a.nranks; ++k) {
    p.src[k] = a.sends[leaves[k]];
    p.out[k] = a.recvs[k];
    p.flags[k] = a.flags[k];
  }
  p.epoch = a.epoch;
  p.nranks = a.nranks;
  return p;
}

template <typename T, int kN, bool kTree, int kVecs>
Status launchAll(const PeerLaunch& a) {
  constexpr uint64_t V = 16 / sizeof(T);
  auto* kernel = peerAllReduceKernel<T, kN, kTree, kVecs>;
  const size_t n = static_cast<size_t>(a.nranks);
  bool aligned = true;
  for (size_t r = 0; r < n; ++r) aligned = aligned && aligned16(a.sends[r]) && aligned16(a.recvs[r]);
  const uint64_t vectors = aligned ? a.count / V : 0;
  const uint64_t tail = a.count - vectors * V;
  const uint64_t widest = std::max((vectors + n - 1) / n, tail);
  int sms = 0, per_sm = 0;
  DETRACE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a.devices[0]));
  DETRACE_CUDA_RETURN_IF_ERROR(cudaSetDevice(a.devices[0]));
  DETRACE_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  const uint64_t resident = static_cast<uint64_t>(sms) * static_cast<uint64_t>(std::max(per_sm, 1));
  const uint64_t blocks = std::clamp<uint64_t>((widest + kThreads - 1) / kThreads, 1,
                                               std::min<uint64_t>(resident, kMaxPeerBlocks));
  PeerParams p = commonParams(a);
  for (size_t r = 0; r < n; ++r) {
    p.rank = static_cast<int>(r);
    p.vbegin = vectors * r / n;
    p.vend = vectors * (r + 1) / n;
    p.ebegin = r + 1 == n ? vectors * V : a.count;
    p.eend = a.count;
    DETRACE_CUDA_RETURN_IF_ERROR(cudaSetDevice(a.devices[r]));
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, a.streams[r]>>>(p);
    DETRACE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return Status::ok();
}

template <typename T, int kN, int kLoads>
Status launchOrder(const PeerLaunch& a) {
  constexpr int kDivisor = kN > 0 ? kN : kLoads;  // the run-time loop: one vector at once
  constexpr int kVecs = std::max(1, kLoads / kDivisor);
  return a.order == ReduceOrder::kTree ? launchAll<T, kN, true, kVecs>(a)
                                       : launchAll<T, kN, false, kVecs>(a);
}

template <typename T, int kLoads>
Status launchRanks(const PeerLaunch& a) {
  switch (a.nranks) {
    case 2: return launchOrder<T, 2, kLoads>(a);
    case 4: return launchOrder<T, 4, kLoads>(a);
    case 8: return launchOrder<T, 8, kLoads>(a);
    default: return launchOrder<T, 0, kLoads>(a);
  }
}

template <typename T>
Status launchTyped(const PeerLaunch& a) {
  return peerLoads() == 8 ? launchRanks<T, 8>(a) : launchRanks<T, 16>(a);
}

}  // namespace

Status launchPeerAllReduce(const PeerLaunch& a) {
  if (a.nranks < 1 || a.nranks > kMaxPeerRanks) {
    return makeError(ErrorCode::kInvalidArgument, "the fused peer all-reduce takes 1 to {} ranks, got {}",
                     kMaxPeerRanks, a.nranks);
  }
  switch (a.dtype) {
    case DType::kF32: return launchTyped<float>(a);
    case DType::kF16: return launchTyped<__half>(a);
    case DType::kBF16: return launchTyped<__nv_bfloat16>(a);
  }
  return makeError(ErrorCode::kInvalidArgument, "unknown dtype {}", static_cast<int>(a.dtype));
}

}  // namespace detrace::kernels::detail
