// Device code of the digest (definition in detrace/kernels/digest.h and docs/digest.md). This file
// is NOT part of the detrace_kernels sources: it is compiled to a fatbin (sm_90 + compute_90 PTX)
// that is embedded in the library and loaded with the driver API, so the host process's CUDA
// runtime never registers it (see kernels/cmake/kernels_extras.cmake).
//
// Design. Four threads (a "quad") hash one 1024-byte chunk, one XXH64 accumulator lane each:
// thread L of the quad reads the 8-byte words at chunk offsets 32 s + 8 L (s = 0..31) straight
// from global memory into registers, so the serial chain per thread is 32 rounds. The quad's lanes
// then meet with shuffles and thread 0 of the quad finishes XXH64 (convergence, length, tail
// bytes, avalanche). No shared memory holds data: the only latency to hide is memory's.
//   - A block is 256 threads = 64 chunks per pass (digest_params.h lists the four modes). Blocks
//     loop over passes (a persistent grid: never more blocks than are resident).
//   - Integer sums mod 2^64 make the result independent of which thread, block or atomic finishes
//     first: per-thread partial sums, block sums, one atomicAdd per block and row.
//   - Memory-level parallelism: ptxas keeps about ten of a thread's loads in flight and interleaves
//     the rest with the rounds. At full occupancy that is ~80 KB in flight per SM, more than
//     bandwidth x latency needs. Small launches, bound by one chunk's latency, first prefetch the
//     whole chunk into L2, so a chunk costs about one DRAM round trip instead of three or four.
//   - Large launches: the 8-byte-aligned kernel the host loads by default is
//     detrace_digest_a8_l2hint, whose loads carry the L2::256B hint (an L2 miss fetches 256 bytes,
//     8 stripes of the chunk, so the quad's next loads hit L2 without holding more registers).
//     Measured on the H200: 4.03 TB/s at 1 GiB against 3.82 with plain loads; prefetching every
//     chunk into L2 in large launches instead was slower than either (3.18 TB/s).
//   - Chunk starts that are multiples of 16 (the usual case) take detrace_digest_a16: each thread
//     loads 16 bytes (half a stripe, with the L2::256B hint) and two shuffles inside the quad give
//     every thread its lane's word of both stripes (laneFull16), so a quad reads 64 contiguous
//     bytes per load and L2 sees half the requests of the 8-byte loader. Measured on the H200:
//     3.84-3.89 TB/s at 256 MiB against 3.59 with 8-byte loads (docs/digest.md).
//   - Alignment: chunk starts that are multiples of 8 (or 4) load 8-byte (two 4-byte) words; any
//     other alignment funnel-shifts three aligned 4-byte words, and falls back to byte loads for
//     the words at the edges of a row, so no byte outside [row start, row end) is ever read.
#include <cstdint>

#include "detrace/kernels/xxh64.h"
#include "digest_params.h"

namespace {

namespace dd = detrace::kernels::detail;
namespace xxh = detrace::kernels::xxh;

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarps = dd::kBlockThreads / 32;

struct SlotView {
  unsigned long long sum;
  unsigned int done_chunks;
  unsigned int pad;
  unsigned long long digest;
};

// The chunk that one quad hashes in a pass.
struct Chunk {
  const unsigned char* start;  // its first byte
  const unsigned char* row_lo;  // its row's bytes: [row_lo, row_hi)
  const unsigned char* row_hi;
  uint32_t len;    // 0: the quad has no chunk in this pass
  uint32_t index;  // chunk index within its row: the XXH64 seed
};

__device__ __forceinline__ Chunk chunkAt(const dd::DigestParams& p, uint64_t row, uint32_t index,
                                         bool valid) {
  Chunk c;
  c.row_lo = reinterpret_cast<const unsigned char*>(p.base + row * p.row_stride);
  c.row_hi = c.row_lo + p.row_bytes;
  const uint64_t offset = static_cast<uint64_t>(index) * dd::kChunkBytes;
  c.start = c.row_lo + offset;
  const uint64_t left = p.row_bytes - offset;
  c.len = valid ? static_cast<uint32_t>(left < dd::kChunkBytes ? left : dd::kChunkBytes) : 0u;
  c.index = index;
  return c;
}

__device__ __forceinline__ void prefetchL2(const unsigned char* a) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}

// The eight 128-byte lines of a full chunk, two per quad thread (nothing for a partial chunk, so
// no line outside the row is touched).
__device__ __forceinline__ void prefetchChunk(const Chunk& c, uint32_t quad_lane) {
  if (c.len == dd::kChunkBytes) {
    prefetchL2(c.start + 128 * quad_lane);
    prefetchL2(c.start + 128 * (quad_lane + 4));
  }
}

__device__ __forceinline__ uint64_t pack(uint32_t lo, uint32_t hi) {
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

__device__ __forceinline__ uint64_t loadBytes(const unsigned char* a, uint32_t n) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(__ldg(a + i)) << (8 * i);
  return v;
}

// kAlign of the 8-byte-aligned loader variant whose loads carry the L2::256B hint: an L2 miss
// then fetches the whole 256-byte block (8 stripes of the chunk) from DRAM, so the quad's next
// loads find it in L2 without holding more registers (an experiment: see docs/digest.md).
constexpr int kAlign8L2Hint = 80;

__device__ __forceinline__ uint64_t ldgL2Hint(const unsigned char* a) {
  unsigned long long v;
  asm("ld.global.nc.L2::256B.u64 %0, [%1];" : "=l"(v) : "l"(a));
  return v;
}

// kAlign of the 16-byte-aligned variant: each thread loads 16 bytes at a time (with the L2::256B
// hint), so a quad reads 64 contiguous bytes (two stripes) per load and L2 sees half the requests
// of the 8-byte loader for the same bytes; the quad then trades words by shuffles (laneFull16).
constexpr int kAlign16 = 160;

__device__ __forceinline__ ulonglong2 ldgL2Hint16(const unsigned char* a) {
  ulonglong2 v;
  asm("ld.global.nc.L2::256B.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(a));
  return v;
}

// The little-endian 8-byte word at a, every chunk start being a multiple of kAlign.
template <int kAlign>
__device__ __forceinline__ uint64_t loadWord(const unsigned char* a, const unsigned char* row_lo,
                                             const unsigned char* row_hi) {
  if constexpr (kAlign == 8) {
    return __ldg(reinterpret_cast<const unsigned long long*>(a));
  } else if constexpr (kAlign == kAlign8L2Hint || kAlign == kAlign16) {
    return ldgL2Hint(a);
  } else if constexpr (kAlign == 4) {
    const auto* u = reinterpret_cast<const unsigned int*>(a);
    return pack(__ldg(u), __ldg(u + 1));
  } else {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(a);
    const auto* u = reinterpret_cast<const unsigned int*>(addr & ~uintptr_t{3});
    const auto* u_bytes = reinterpret_cast<const unsigned char*>(u);
    if (u_bytes < row_lo || u_bytes + 12 > row_hi) return loadBytes(a, 8);  // row edges
    const unsigned sh = static_cast<unsigned>(addr & 3) * 8;
    const uint32_t u0 = __ldg(u), u1 = __ldg(u + 1), u2 = __ldg(u + 2);
    return pack(__funnelshift_r(u0, u1, sh), __funnelshift_r(u1, u2, sh));
  }
}

// This thread's XXH64 lane over a full chunk (32 stripes); w = chunk start + 8 L.
template <int kAlign, int kBatch>
__device__ __forceinline__ uint64_t laneFull(const unsigned char* w, const Chunk& c, uint64_t acc) {
  const unsigned char* lo = c.row_lo;
  const unsigned char* hi = c.row_hi;
#pragma unroll
  for (int b = 0; b < dd::kStripesPerChunk; b += kBatch) {
    uint64_t x[kBatch];
#pragma unroll
    for (int s = 0; s < kBatch; ++s) x[s] = loadWord<kAlign>(w + 32 * (b + s), lo, hi);
#pragma unroll
    for (int s = 0; s < kBatch; ++s) acc = xxh::round64(acc, x[s]);
  }
  return acc;
}

// laneFull for chunk starts aligned to 16 bytes. Quad thread L loads the 16 bytes at chunk offset
// 64 t + 16 L (t = 0..15): stripe 2t + (L >> 1), lanes 2 (L & 1) and 2 (L & 1) + 1. It needs lane
// L of stripes 2t and 2t + 1, which two shuffles within the quad bring: in the first, thread j
// sends word j >> 1 of its pair and thread L reads thread 2 (L & 1) + (L >> 1), so receiving lane
// L of stripe 2t + (L & 1); in the second, thread j sends the other word and thread L reads thread
// 2 (1 - (L & 1)) + (L >> 1), receiving lane L of the other stripe. Each pair of source and
// receiver is a permutation of the quad, so one shuffle serves all four. Called by all four
// threads of the quad (the shuffles name only them); c_start is the chunk's first byte.
template <int kBatch>
__device__ __forceinline__ uint64_t laneFull16(const unsigned char* c_start, uint32_t quad_lane,
                                               uint64_t acc) {
  const uint32_t lane = threadIdx.x & 31, quad_base = lane & ~3u;
  const unsigned mask = 0xfu << quad_base;
  const uint32_t odd = quad_lane & 1, half = quad_lane >> 1;
  const int src_a = static_cast<int>(quad_base + 2 * odd + half);
  const int src_b = static_cast<int>(quad_base + 2 * (1 - odd) + half);
  const unsigned char* a = c_start + 16 * quad_lane;
  constexpr int kLoads = dd::kStripesPerChunk / 2;  // 16 loads of 16 bytes per thread
  constexpr int kStep = kBatch / 2;                 // loads in flight per batch
#pragma unroll
  for (int t0 = 0; t0 < kLoads; t0 += kStep) {
    ulonglong2 v[kStep];
#pragma unroll
    for (int t = 0; t < kStep; ++t) v[t] = ldgL2Hint16(a + 64 * (t0 + t));
#pragma unroll
    for (int t = 0; t < kStep; ++t) {
      const uint64_t send_a = half ? v[t].y : v[t].x;
      const uint64_t send_b = half ? v[t].x : v[t].y;
      // With T = t0 + t, the chunk's stripes 2T and 2T + 1:
      const uint64_t got_a = __shfl_sync(mask, send_a, src_a);  // stripe 2T + odd
      const uint64_t got_b = __shfl_sync(mask, send_b, src_b);  // stripe 2T + 1 - odd
      acc = xxh::round64(acc, odd ? got_b : got_a);
      acc = xxh::round64(acc, odd ? got_a : got_b);
    }
  }
  return acc;
}

// The same over the first `stripes` (< 32) stripes of a partial chunk, the last of a row.
template <int kAlign>
__device__ __noinline__ uint64_t lanePartial(const unsigned char* w, const unsigned char* lo,
                                             const unsigned char* hi, uint64_t acc,
                                             uint32_t stripes) {
  constexpr uint32_t kBatch = 8;
  for (uint32_t b = 0; b < stripes; b += kBatch) {
    uint64_t x[kBatch];
#pragma unroll
    for (uint32_t s = 0; s < kBatch; ++s) {
      x[s] = b + s < stripes ? loadWord<kAlign>(w + 32 * (b + s), lo, hi) : 0;
    }
#pragma unroll
    for (uint32_t s = 0; s < kBatch; ++s) {
      if (b + s < stripes) acc = xxh::round64(acc, x[s]);
    }
  }
  return acc;
}

// XXH64's tail and avalanche for the n < 32 bytes at p (any alignment, read byte by byte, all
// loads issued before the first use); h already includes the length. Same steps as
// xxh::finalizeTail, on registers.
__device__ __noinline__ uint64_t finishTail(uint64_t h, const unsigned char* p, uint32_t n) {
  uint64_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (uint32_t i = 0; i < 32; ++i) {
    if (i < n) w[i / 8] |= static_cast<uint64_t>(__ldg(p + i)) << (8 * (i % 8));
  }
#pragma unroll
  for (uint32_t k = 0; k < 3; ++k) {
    if (8 * k + 8 <= n) {
      h ^= xxh::round64(0, w[k]);
      h = xxh::rotl64(h, 27) * xxh::kPrime1 + xxh::kPrime4;
    }
  }
  const uint32_t whole = n / 8;
  uint64_t rest = whole == 0 ? w[0] : whole == 1 ? w[1] : whole == 2 ? w[2] : w[3];
  uint32_t r = n % 8;
  if (r >= 4) {
    h ^= (rest & 0xffffffffull) * xxh::kPrime1;
    h = xxh::rotl64(h, 23) * xxh::kPrime2 + xxh::kPrime3;
    rest >>= 32;
    r -= 4;
  }
  for (; r > 0; --r, rest >>= 8) {
    h ^= (rest & 0xff) * xxh::kPrime5;
    h = xxh::rotl64(h, 11) * xxh::kPrime1;
  }
  return xxh::avalanche(h);
}

// XXH64 of the quad's chunk, seed = chunk index. Returns it in quad thread 0 (0 in the other
// threads and when the quad has no chunk). Must be called by all 32 lanes of the warp.
template <int kAlign, int kBatch>
__device__ __forceinline__ uint64_t hashChunk(const Chunk& c, uint32_t quad_lane, bool prefetch) {
  const uint64_t seed = c.index;
  uint64_t acc = quad_lane == 0 ? seed + xxh::kPrime1 + xxh::kPrime2
               : quad_lane == 1 ? seed + xxh::kPrime2
               : quad_lane == 2 ? seed
                                : seed - xxh::kPrime1;
  const uint32_t stripes = c.len / 32;
  const unsigned char* w = c.start + 8 * quad_lane;
  if (stripes == dd::kStripesPerChunk) {
    // ptxas keeps only about ten of the lane's loads in flight (it interleaves the rest with the
    // rounds), so in small launches the whole chunk is first asked of L2: the later loads then
    // wait for L2, not for DRAM. Two 128-byte lines per thread, 8 per quad, all inside the chunk.
    if (prefetch) {
      prefetchL2(c.start + 128 * quad_lane);
      prefetchL2(c.start + 128 * (quad_lane + 4));
    }
    if constexpr (kAlign == kAlign16) {
      acc = laneFull16<kBatch>(c.start, quad_lane, acc);
    } else {
      acc = laneFull<kAlign, kBatch>(w, c, acc);
    }
  } else if (stripes != 0) {
    acc = lanePartial<kAlign>(w, c.row_lo, c.row_hi, acc, stripes);
  }
  const uint64_t v2 = __shfl_down_sync(kFullMask, acc, 1);
  const uint64_t v3 = __shfl_down_sync(kFullMask, acc, 2);
  const uint64_t v4 = __shfl_down_sync(kFullMask, acc, 3);
  if (quad_lane != 0 || c.len == 0) return 0;
  uint64_t h;
  if (stripes != 0) {
    const uint64_t v[4] = {acc, v2, v3, v4};
    h = xxh::convergeLanes(v);
  } else {
    h = seed + xxh::kPrime5;
  }
  h += c.len;
  const uint32_t tail = c.len % 32;
  return tail == 0 ? xxh::avalanche(h) : finishTail(h, c.start + (c.len - tail), tail);
}

// Adds a block's partial sum of n chunks to row `row`; whoever completes the row finalises it
// and re-zeroes the slot. Called by one thread.
__device__ void addToRow(const dd::DigestParams& p, uint64_t row, uint64_t sum, uint32_t n) {
  auto* out = reinterpret_cast<unsigned long long*>(p.out);
  if (n == p.chunks_per_row) {  // this block saw the whole row
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

__device__ __forceinline__ uint64_t warpSum(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Sum over the block, valid in thread 0. Called by all threads.
__device__ uint64_t blockSum(uint64_t v, uint64_t* red) {
  v = warpSum(v);
  __syncthreads();  // the previous call's reader is done with red
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  uint64_t s = 0;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < kWarps; ++i) s += red[i];
  }
  return s;
}

// kSplit: every pass is a tile of 64 chunks of one row. Which passes a block runs: see SchedMode.
template <int kAlign, int kBatch>
__device__ void splitRows(const dd::DigestParams& p) {
  __shared__ uint64_t red[kWarps];
  const uint32_t q = threadIdx.x / 4, quad_lane = threadIdx.x % 4;
  const uint32_t g = p.chunks_per_row, tpr = p.tiles_per_row;
  // kSchedStrided: passes blockIdx.x, + gridDim.x, ...; kSchedContiguous: one run of consecutive
  // passes per block, so that a block leaves a row (a barrier and an atomic) once per row it
  // touches rather than once per pass.
  const bool contiguous = p.sched == dd::kSchedContiguous;
  const uint64_t per_block = (p.passes + gridDim.x - 1) / gridDim.x;
  const uint64_t first_pass = contiguous ? blockIdx.x * per_block : blockIdx.x;
  const uint64_t end_pass = contiguous ? min(first_pass + per_block, p.passes) : p.passes;
  const uint64_t stride = contiguous ? 1 : gridDim.x;
  // The pass's (row, tile) advance by a fixed step: no division in the loop.
  uint64_t row = first_pass / tpr;
  uint32_t tile = static_cast<uint32_t>(first_pass % tpr);
  const uint64_t step_rows = stride / tpr;
  const uint32_t step_tiles = static_cast<uint32_t>(stride % tpr);
  uint64_t run_row = row, run_sum = 0;
  uint32_t run_chunks = 0;  // block-uniform
  for (uint64_t pass = first_pass; pass < end_pass; pass += stride) {
    if (row != run_row) {
      const uint64_t s = blockSum(run_sum, red);
      if (threadIdx.x == 0) addToRow(p, run_row, s, run_chunks);
      run_row = row;
      run_sum = 0;
      run_chunks = 0;
    }
    const uint32_t first = tile * dd::kPassChunks;
    const Chunk c = chunkAt(p, row, first + q, first + q < g);
    uint32_t next_tile = tile + step_tiles;
    uint64_t next_row = row + step_rows;
    if (next_tile >= tpr) {
      next_tile -= tpr;
      ++next_row;
    }
    if (p.prefetch == dd::kPrefetchNextPass) {
      // Ask L2 for this pass's chunk (first pass only) and for the next pass's, one pass ahead.
      if (pass == first_pass) prefetchChunk(c, quad_lane);
      const uint32_t next_index = next_tile * dd::kPassChunks + q;
      if (pass + stride < end_pass && next_index < g) {
        prefetchChunk(chunkAt(p, next_row, next_index, true), quad_lane);
      }
    }
    run_sum += hashChunk<kAlign, kBatch>(c, quad_lane, p.prefetch == dd::kPrefetchThisPass);
    run_chunks += min(static_cast<uint32_t>(dd::kPassChunks), g - first);
    tile = next_tile;
    row = next_row;
  }
  if (run_chunks == 0) return;  // block-uniform: a block without passes (a digestMany launch's
                                // grid is its largest digest's, so smaller ones have such blocks)
  const uint64_t s = blockSum(run_sum, red);
  if (threadIdx.x == 0) addToRow(p, run_row, s, run_chunks);
}

// kPackedWarp: rows of g <= 8 chunks, rows_per_group of them in each warp's 8 quads.
template <int kAlign, int kBatch>
__device__ void packedWarpRows(const dd::DigestParams& p) {
  const uint32_t lane = threadIdx.x % 32, slot = lane / 4, quad_lane = lane % 4;
  const uint32_t g = p.chunks_per_row, rpg = p.rows_per_group;
  const uint32_t rows_per_pass = kWarps * rpg;
  const bool has_slot = slot < rpg * g;
  const uint32_t row_in_pass = (threadIdx.x / 32) * rpg + slot / g;
  const uint32_t index = slot % g;
  auto* out = reinterpret_cast<unsigned long long*>(p.out);
  for (uint64_t pass = blockIdx.x; pass < p.passes; pass += gridDim.x) {
    const uint64_t row = pass * rows_per_pass + row_in_pass;
    const bool valid = has_slot && row < p.rows;
    const uint64_t h = hashChunk<kAlign, kBatch>(chunkAt(p, row, index, valid), quad_lane,
                                                 p.prefetch == dd::kPrefetchThisPass);
    uint64_t sum = 0;  // the row leader (index 0) sums slots slot .. slot + g - 1
#pragma unroll
    for (uint32_t i = 0; i < dd::kWarpChunks; ++i) {
      const uint64_t v = __shfl_sync(kFullMask, h, 4 * i);
      if (i >= slot && i < slot + g) sum += v;
    }
    if (valid && index == 0 && quad_lane == 0) out[row] = xxh::digestFinal(sum, p.row_bytes);
  }
}

// kPackedBlock: rows of 9..64 chunks, rows_per_group of them in the block's 64 quads.
template <int kAlign, int kBatch>
__device__ void packedBlockRows(const dd::DigestParams& p) {
  __shared__ uint64_t hashes[2][dd::kPassChunks];  // double-buffered: one barrier per pass
  const uint32_t q = threadIdx.x / 4, quad_lane = threadIdx.x % 4;
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t g = p.chunks_per_row, rpg = p.rows_per_group;
  const bool has_slot = q < rpg * g;
  const uint32_t row_in_pass = q / g, index = q % g;
  auto* out = reinterpret_cast<unsigned long long*>(p.out);
  int parity = 0;
  for (uint64_t pass = blockIdx.x; pass < p.passes; pass += gridDim.x) {
    const uint64_t row = pass * rpg + row_in_pass;
    const bool valid = has_slot && row < p.rows;
    const uint64_t h = hashChunk<kAlign, kBatch>(chunkAt(p, row, index, valid), quad_lane,
                                                 p.prefetch == dd::kPrefetchThisPass);
    if (quad_lane == 0) hashes[parity][q] = h;
    __syncthreads();
    const uint64_t my_row = pass * rpg + warp;  // warp w sums the pass's row w (rpg <= 7)
    if (warp < rpg && my_row < p.rows) {
      uint64_t v = 0;
      if (lane < g) v += hashes[parity][warp * g + lane];
      if (lane + 32 < g) v += hashes[parity][warp * g + lane + 32];
      v = warpSum(v);
      if (lane == 0) out[my_row] = xxh::digestFinal(v, p.row_bytes);
    }
    parity ^= 1;
  }
}

__device__ void emptyRows(const dd::DigestParams& p) {
  auto* out = reinterpret_cast<unsigned long long*>(p.out);
  const uint64_t d = xxh::digestFinal(0, 0);
  for (uint64_t r = blockIdx.x * uint64_t{dd::kBlockThreads} + threadIdx.x; r < p.rows;
       r += uint64_t{gridDim.x} * dd::kBlockThreads) {
    out[r] = d;
  }
}

template <int kAlign, int kBatch>
__device__ __forceinline__ void digestAligned(const dd::DigestParams& p) {
  switch (p.mode) {
    case dd::kPackedWarp: packedWarpRows<kAlign, kBatch>(p); break;
    case dd::kPackedBlock: packedBlockRows<kAlign, kBatch>(p); break;
    default: splitRows<kAlign, kBatch>(p); break;
  }
}

template <int kAlign, int kBatch>
__device__ __forceinline__ void digestAny(const dd::DigestParams& p) {
  if (p.mode == dd::kEmpty) {
    emptyRows(p);
  } else {
    digestAligned<kAlign, kBatch>(p);
  }
}

}  // namespace

// Four entry points, one per chunk alignment (16, 8, 4, 1): separate kernels rather than a switch
// inside one, so that each gets its own register allocation (one kernel holding the three
// older loaders spilled under the 64-register bound). The host picks one per launch (digest.cc).
// 256 threads and <= 64 registers: 4 blocks (32 warps) per SM. The 16-byte loader fits there with
// 4 loads (8 words) in flight per batch (its _many form spills 4 bytes, nvcc 13.0); its _deep
// variant keeps 8 (16 words, as many as the 8-byte loader) at 3 blocks per SM, since at 64
// registers it spilled 76 bytes. The byte-aligned loader holds
// three 4-byte words per 8-byte word, so it keeps 8 loads in flight and asks for 3 blocks per SM.
// Every loader variant, as X(name suffix, words per load batch, min blocks per SM, loader); each
// kernel family below is instantiated once per variant
// (detrace_digest_<suffix>[_via|_many|_many_via]).
#define DETRACE_DIGEST_VARIANTS(X)     \
  X(a16, 8, 4, kAlign16)               \
  X(a16_deep, 16, 3, kAlign16)         \
  X(a8, 16, 4, 8)                      \
  X(a8_l2hint, 16, 4, kAlign8L2Hint)   \
  X(a4, 16, 4, 4)                      \
  X(a1, 8, 3, 1)

#define DETRACE_DIGEST_KERNEL(suffix, batch, min_blocks, align)                             \
  extern "C" __global__ void __launch_bounds__(dd::kBlockThreads, min_blocks)            \
      detrace_digest_##suffix(const dd::DigestParams p) {                                 \
    digestAny<align, batch>(p);                                                           \
  }

DETRACE_DIGEST_VARIANTS(DETRACE_DIGEST_KERNEL)

// The same kernels for launches captured into a CUDA graph, whose every replay must write its
// digests somewhere else: p.out is the device address of a word that holds the destination's base
// (stored before each replay by detrace_store_words), and the digests go to that base plus
// p.out_offset words. A base of 0 (a replay the tracer does not record) skips the digest: every
// thread reads the same word, so the whole grid returns before any barrier. Separate entry points,
// so the kernels above are compiled exactly as before.
namespace {
// A *_via digest: p.out is the cell; every thread of the digest reads it, so a base of 0 returns
// them all before any barrier.
template <int kAlign, int kBatch>
__device__ __forceinline__ void digestVia(const dd::DigestParams& p) {
  const unsigned long long base = *reinterpret_cast<const volatile unsigned long long*>(p.out);
  if (base == 0) return;
  dd::DigestParams q = p;
  q.out = base + 8ull * p.out_offset;
  digestAny<kAlign, kBatch>(q);
}
}  // namespace

#define DETRACE_DIGEST_KERNEL_VIA(suffix, batch, min_blocks, align)                         \
  extern "C" __global__ void __launch_bounds__(dd::kBlockThreads, min_blocks)            \
      detrace_digest_##suffix##_via(const dd::DigestParams p) {                           \
    digestVia<align, batch>(p);                                                           \
  }

DETRACE_DIGEST_VARIANTS(DETRACE_DIGEST_KERNEL_VIA)

namespace {
// The completion signal of a digestMany launch (DigestBatch::done_flag): every block makes its
// results visible to the host, then counts itself; the last one stores the signal and leaves the
// counter zero for the next launch. Called by all threads of every block (gridDim.y == b.count).
__device__ void signalDone(const dd::DigestBatch& b) {
  __threadfence_system();  // this thread's digests, before the block is counted
  __syncthreads();
  if (threadIdx.x != 0) return;
  auto* counter = reinterpret_cast<unsigned int*>(b.done_counter);
  const unsigned int blocks = gridDim.x * gridDim.y;
  if (atomicAdd(counter, 1u) != blocks - 1) return;
  __threadfence_system();  // the other blocks' digests, before the signal
  atomicExch(counter, 0u);
  *reinterpret_cast<volatile unsigned long long*>(b.done_flag) = b.done_value;
}
}  // namespace

// Several digests in one launch (Digester::digestMany): blockIdx.y picks one, which runs exactly as
// it would alone on gridDim.x blocks. The batch stays in parameter space (__grid_constant__): each
// block reads only its own digest's fields, without a copy of the whole batch.
#define DETRACE_DIGEST_KERNEL_MANY(suffix, batch, min_blocks, align)                        \
  extern "C" __global__ void __launch_bounds__(dd::kBlockThreads, min_blocks)            \
      detrace_digest_##suffix##_many(const __grid_constant__ dd::DigestBatch b) {         \
    if (blockIdx.y >= b.count) return;                                                    \
    digestAny<align, batch>(b.params[blockIdx.y]);                                        \
    if (b.done_flag != 0) signalDone(b);                                                  \
  }

DETRACE_DIGEST_VARIANTS(DETRACE_DIGEST_KERNEL_MANY)

// Several *_via digests in one launch (Digester::digestManyVia, for CUDA graph captures): blockIdx.y
// picks one, whose p.out is the cell holding the replay's destination base and p.out_offset its
// place there, as in the *_via kernels. Every block of one digest reads the same cell, so a base of
// 0 returns them all before any barrier. No completion signal (a replay's end is its own event).
#define DETRACE_DIGEST_KERNEL_MANY_VIA(suffix, batch, min_blocks, align)                    \
  extern "C" __global__ void __launch_bounds__(dd::kBlockThreads, min_blocks)            \
      detrace_digest_##suffix##_many_via(const __grid_constant__ dd::DigestBatch b) {     \
    if (blockIdx.y >= b.count) return;                                                    \
    digestVia<align, batch>(b.params[blockIdx.y]);                                        \
  }

DETRACE_DIGEST_VARIANTS(DETRACE_DIGEST_KERNEL_MANY_VIA)

// Stores p.value[i] to the device word p.addr[i] for i < p.count (one block). Launched on a stream
// just before a CUDA graph (the destinations of its *_via digests) and just after it (0: the graph's
// next, unrecorded, replays skip their digests).
extern "C" __global__ void detrace_store_words(const dd::StoreParams p) {
  const uint32_t i = threadIdx.x;
  if (i < p.count) *reinterpret_cast<volatile unsigned long long*>(p.addr[i]) = p.value[i];
}
