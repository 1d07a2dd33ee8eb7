// Device code of the digest (definition in detrace/kernels/digest.h and docs/digest.md). This file
// is NOT part of the detrace_kernels sources: it is compiled to a fatbin (sm_90 + compute_90 PTX)
// that is embedded in the library and loaded with the driver API, so the host process's CUDA
// runtime never registers it (see kernels/cmake/digest_fatbin.cmake).
//
// Design. One warp (one block of 32 threads) hashes a tile of 16 chunks side by side: lanes 2q and
// 2q+1 own chunk q and run XXH64's four lanes two each (lane 2q: v1, v2; lane 2q+1: v3, v4), which
// halves the serial depth compared to one thread per chunk. A chunk's 4096 bytes are streamed
// through shared memory in 512-byte slices with a double-buffered cp.async pipeline, so the loads of the
// next slices are in flight while the current one is hashed and no register holds staged data.
// The pipeline runs across tiles: a warp's tiles form one stream of slices.
//   - Alignment: each lane pair stages the 16-byte aligned words that overlap its slice. Words
//     entirely inside the chunk go through cp.async; the at most two words that stick out of it
//     (unaligned start or a length not a multiple of 16) are copied byte by byte, so no byte
//     outside the chunk is ever read. Hashing then reads shared memory at the chunk's misalignment
//     with 16-, 8-, 4-byte or funnel-shifted loads.
//   - Packed rows (at most 16 chunks per row): a tile holds whole rows; the warp sums each row's
//     chunk hashes with shuffles and finalises it. No atomics, no workspace.
//   - Split rows (more than 16 chunks, and the whole-buffer digest): every tile belongs to one row;
//     a warp sums its tiles of the same row locally and adds them to the row's DigestSlot with one
//     atomicAdd. The contributor whose chunk count completes the row (threadfence + atomic counter)
//     finalises and resets the slot, which is therefore reusable without a memset.
// Integer sums mod 2^64 make the result independent of which warp finishes first.
#include <cuda_pipeline.h>

#include <cstdint>

#include "detrace/kernels/xxh64.h"
#include "digest_params.h"

namespace {

using detrace::kernels::detail::DigestParams;
using detrace::kernels::detail::kSliceBytes;
using detrace::kernels::detail::kTileChunks;
namespace xxh = detrace::kernels::xxh;

// Two stages (double buffering) keep a warp's shared memory at 17 KB, so 12 warps fit on an SM:
// ncu showed the hashing is issue-latency bound with 6 warps per SM (4 stages), not memory bound.
constexpr int kStages = 2;
constexpr int kSlotBytes = 544;  // 33 staged words (528 B) rounded so 4 slots span all 32 banks
constexpr int kStageBytes = kTileChunks * kSlotBytes;
constexpr int kWordsPerSlice = 33;  // 16-byte words that can overlap one 512-byte slice
constexpr unsigned kFullMask = 0xffffffffu;

struct SlotView {
  unsigned long long sum;
  unsigned int done_chunks;
  unsigned int pad;
  unsigned long long digest;
};

// The chunk that one lane pair owns in a tile.
struct Chunk {
  uint64_t start;  // device address of its first byte
  uint32_t len;    // 0: the pair has no chunk in this tile
  uint32_t index;  // chunk index within its row: the XXH64 seed
  uint32_t row;
};

__device__ Chunk chunkOf(const DigestParams& p, uint64_t tile, int q) {
  Chunk c{0, 0, 0, 0};
  uint64_t row;
  uint32_t index;
  if (p.rows_per_tile != 0) {  // packed rows
    const uint32_t g = p.chunks_per_row;
    if (static_cast<uint32_t>(q) >= p.rows_per_tile * g) return c;
    row = tile * p.rows_per_tile + static_cast<uint32_t>(q) / g;
    index = static_cast<uint32_t>(q) % g;
    if (row >= p.rows) return c;
  } else {  // split rows
    row = tile / p.tiles_per_row;
    index = static_cast<uint32_t>(tile % p.tiles_per_row) * kTileChunks + q;
    if (index >= p.chunks_per_row) return c;
  }
  const uint64_t offset = static_cast<uint64_t>(index) * 4096;
  c.start = p.base + row * p.row_stride + offset;
  const uint64_t left = p.row_bytes - offset;
  c.len = static_cast<uint32_t>(left < 4096 ? left : 4096);
  c.index = index;
  c.row = static_cast<uint32_t>(row);
  return c;
}

// Stages slice k of chunk c into `slot`: byte (c.start + 512k + i) lands at slot[mis + i], where
// mis = c.start & 15. Lane j of the pair takes words j, j+2, ...
__device__ void stageSlice(const Chunk& c, uint32_t k, unsigned char* slot, int j) {
  if (c.len == 0 || k * kSliceBytes >= c.len) return;
  const uint64_t chunk_end = c.start + c.len;
  const uint64_t lo = c.start + static_cast<uint64_t>(k) * kSliceBytes;
  const uint64_t hi = min(lo + kSliceBytes, chunk_end);
  const uint64_t a0 = lo & ~uint64_t{15};
  for (int w = j; w < kWordsPerSlice; w += 2) {
    const uint64_t a = a0 + 16u * w;
    if (a >= hi) break;
    unsigned char* dst = slot + 16 * w;
    if (a >= c.start && a + 16 <= chunk_end) {
      __pipeline_memcpy_async(dst, reinterpret_cast<const void*>(a), 16);
    } else {  // a word that sticks out of the chunk: copy only the slice's bytes in it
      const uint64_t b0 = max(a, lo);
      const uint64_t b1 = min(a + 16, hi);
      for (uint64_t b = b0; b < b1; ++b) dst[b - a] = *reinterpret_cast<const unsigned char*>(b);
    }
  }
}

__device__ __forceinline__ uint64_t pack(uint32_t lo, uint32_t hi) {
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Loads 16 bytes from shared memory at p, whose alignment class is kAlign (16, 8, 4, or 1: any).
template <int kAlign>
__device__ __forceinline__ void load16(const unsigned char* p, uint64_t& w0, uint64_t& w1) {
  if constexpr (kAlign == 16) {
    const ulonglong2 v = *reinterpret_cast<const ulonglong2*>(p);
    w0 = v.x;
    w1 = v.y;
  } else if constexpr (kAlign == 8) {
    w0 = reinterpret_cast<const uint64_t*>(p)[0];
    w1 = reinterpret_cast<const uint64_t*>(p)[1];
  } else if constexpr (kAlign == 4) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(p);
    w0 = pack(u[0], u[1]);
    w1 = pack(u[2], u[3]);
  } else {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    const uint32_t* u = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
    const unsigned sh = static_cast<unsigned>(addr & 3) * 8;
    const uint32_t u0 = u[0], u1 = u[1], u2 = u[2], u3 = u[3], u4 = u[4];
    w0 = pack(__funnelshift_r(u0, u1, sh), __funnelshift_r(u1, u2, sh));
    w1 = pack(__funnelshift_r(u2, u3, sh), __funnelshift_r(u3, u4, sh));
  }
}

// Runs `count` stripes of this lane's two XXH64 lanes over staged data at p (stripe stride 32).
template <int kAlign>
__device__ __forceinline__ void hashStripes(const unsigned char* p, uint32_t count, uint64_t& a,
                                            uint64_t& b) {
  if (count == 16) {
#pragma unroll
    for (int s = 0; s < 16; ++s) {
      uint64_t w0, w1;
      load16<kAlign>(p + 32 * s, w0, w1);
      a = xxh::round64(a, w0);
      b = xxh::round64(b, w1);
    }
  } else {
    for (uint32_t s = 0; s < count; ++s) {
      uint64_t w0, w1;
      load16<kAlign>(p + 32 * s, w0, w1);
      a = xxh::round64(a, w0);
      b = xxh::round64(b, w1);
    }
  }
}

// Hashes slice k of the pair's chunk from `slot`; after the chunk's last slice, lane 2q holds
// the chunk's XXH64 in h. Must be called by the whole warp (it shuffles).
__device__ void hashSlice(const Chunk& c, uint32_t k, const unsigned char* slot, int j,
                          uint64_t& a, uint64_t& b, uint64_t& h) {
  const bool has = c.len != 0 && k * kSliceBytes < c.len;
  const uint32_t mis = static_cast<uint32_t>(c.start & 15);
  if (has) {
    const uint32_t stripes = c.len / 32;
    const uint32_t first = k * (kSliceBytes / 32);
    const uint32_t count = stripes > first ? min(stripes - first, 16u) : 0u;
    const unsigned char* p = slot + mis + 16 * j;
    if (mis == 0) {
      hashStripes<16>(p, count, a, b);
    } else if (mis == 8) {
      hashStripes<8>(p, count, a, b);
    } else if ((mis & 3) == 0) {
      hashStripes<4>(p, count, a, b);
    } else {
      hashStripes<1>(p, count, a, b);
    }
  }
  const bool last = has && k == (c.len - 1) / kSliceBytes;
  if (!__any_sync(kFullMask, last)) return;
  const uint64_t c3 = __shfl_xor_sync(kFullMask, a, 1);
  const uint64_t c4 = __shfl_xor_sync(kFullMask, b, 1);
  if (!last || j != 0) return;
  uint64_t acc;
  if (c.len >= 32) {
    const uint64_t v[4] = {a, b, c3, c4};
    acc = xxh::convergeLanes(v);
  } else {
    acc = static_cast<uint64_t>(c.index) + xxh::kPrime5;
  }
  acc += c.len;
  const uint32_t full = c.len & ~31u;
  h = xxh::finalizeTail(acc, slot + mis + (full - k * kSliceBytes), c.len & 31u);
}

__device__ void startChunk(const Chunk& c, int j, uint64_t& a, uint64_t& b, uint64_t& h) {
  uint64_t v[4];
  xxh::initLanes(c.index, v);
  a = j == 0 ? v[0] : v[2];  // selects, not a runtime index (keeps v in registers)
  b = j == 0 ? v[1] : v[3];
  h = 0;
}

// Adds a warp's partial sum of `n` chunks to row `row`; whoever completes the row finalises it.
__device__ void addToRow(const DigestParams& p, uint32_t row, uint64_t sum, uint32_t n) {
  if (n == 0) return;
  auto* out = reinterpret_cast<unsigned long long*>(p.out);
  if (n == p.chunks_per_row) {  // this warp saw the whole row
    out[row] = xxh::digestFinal(sum, p.row_bytes);
    return;
  }
  SlotView* slot = reinterpret_cast<SlotView*>(p.slots) + row;
  atomicAdd(&slot->sum, static_cast<unsigned long long>(sum));
  __threadfence();
  const unsigned int before = atomicAdd(&slot->done_chunks, n);
  if (before + n != p.chunks_per_row) return;
  __threadfence();
  const uint64_t total = atomicExch(&slot->sum, 0ull);
  atomicExch(&slot->done_chunks, 0u);
  out[row] = xxh::digestFinal(total, p.row_bytes);
}

// Packed rows: the leader pair of each row sums its row's chunk hashes and finalises.
__device__ void finishPackedTile(const DigestParams& p, const Chunk& c, int q, int j, uint64_t h) {
  const bool leader = j == 0 && c.len != 0 && c.index == 0;
  const int g = static_cast<int>(p.chunks_per_row);
  uint64_t sum = 0;
#pragma unroll
  for (int i = 0; i < kTileChunks; ++i) {
    const uint64_t v = __shfl_sync(kFullMask, h, 2 * i);
    if (leader && i >= q && i < q + g) sum += v;
  }
  if (leader) {
    reinterpret_cast<unsigned long long*>(p.out)[c.row] = xxh::digestFinal(sum, p.row_bytes);
  }
}

// Split rows: warp-sum of the tile's chunk hashes (lane 0 ends up with it).
__device__ void sumSplitTile(const Chunk& c, int j, uint64_t h, uint64_t& sum, uint32_t& n) {
  uint64_t s = j == 0 ? h : 0;
  uint32_t k = (j == 0 && c.len != 0) ? 1u : 0u;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
  k = __reduce_add_sync(kFullMask, k);
  sum = s;
  n = k;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(32) detrace_digest(DigestParams p) {
  __shared__ __align__(16) unsigned char smem[kStages * kStageBytes];
  const int lane = static_cast<int>(threadIdx.x);
  const int q = lane >> 1;
  const int j = lane & 1;
  if (p.chunks_per_row == 0) {  // empty rows: S = 0, len = 0
    auto* out = reinterpret_cast<unsigned long long*>(p.out);
    for (uint64_t r = blockIdx.x * 32ull + lane; r < p.rows; r += gridDim.x * 32ull) {
      out[r] = xxh::digestFinal(0, 0);
    }
    return;
  }
  const uint64_t warps = gridDim.x;
  const uint32_t slices = p.slices_per_tile;
  unsigned char* my_slot = smem + q * kSlotBytes;

  // Issue side of the pipeline: runs kStages - 1 slices ahead of the hashing side.
  uint64_t issue_tile = blockIdx.x;
  uint32_t issue_slice = 0;
  Chunk issue_chunk = chunkOf(p, issue_tile, q);
  auto issueNext = [&](int stage) {
    if (issue_tile < p.tiles) {
      stageSlice(issue_chunk, issue_slice, my_slot + stage * kStageBytes, j);
      if (++issue_slice == slices) {
        issue_slice = 0;
        issue_tile += warps;
        if (issue_tile < p.tiles) issue_chunk = chunkOf(p, issue_tile, q);
      }
    }
    __pipeline_commit();
  };
  for (int s = 0; s < kStages - 1; ++s) issueNext(s);

  uint64_t tile = blockIdx.x;
  uint32_t slice = 0;
  int stage = 0;
  Chunk chunk = chunkOf(p, tile, q);
  uint64_t a, b, h;
  startChunk(chunk, j, a, b, h);
  uint32_t run_row = 0;  // split rows: this warp's running (row, sum, chunk count)
  uint64_t run_sum = 0;
  uint32_t run_n = 0;
  while (tile < p.tiles) {
    issueNext((stage + kStages - 1) % kStages);
    __pipeline_wait_prior(kStages - 1);
    __syncwarp();
    hashSlice(chunk, slice, my_slot + stage * kStageBytes, j, a, b, h);
    __syncwarp();
    stage = (stage + 1) % kStages;
    if (++slice < slices) continue;
    if (p.rows_per_tile != 0) {
      finishPackedTile(p, chunk, q, j, h);
    } else {
      uint64_t s;
      uint32_t n;
      sumSplitTile(chunk, j, h, s, n);
      const uint32_t row = static_cast<uint32_t>(tile / p.tiles_per_row);
      if (lane == 0) {
        if (row != run_row) {
          addToRow(p, run_row, run_sum, run_n);
          run_sum = 0;
          run_n = 0;
        }
        run_row = row;
        run_sum += s;
        run_n += n;
      }
    }
    slice = 0;
    tile += warps;
    if (tile < p.tiles) {
      chunk = chunkOf(p, tile, q);
      startChunk(chunk, j, a, b, h);
    }
  }
  if (p.rows_per_tile == 0 && lane == 0) addToRow(p, run_row, run_sum, run_n);
}
