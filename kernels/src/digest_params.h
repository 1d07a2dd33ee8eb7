// Launch parameters of the digest kernels, shared by the host launcher (digest.cc) and the device
// code compiled into the embedded fatbin (kernels/fatbin/digest_kernels.cu). Plain data only.
//
// Work is cut into passes of one block: 256 threads = 64 quads, one quad (4 threads, one XXH64
// lane each) per 1024-byte chunk. A block runs passes blockIdx.x, blockIdx.x + gridDim.x, ...
//   - kPackedWarp (rows of 1..8 chunks): a warp's 8 quads hold whole rows; the warp sums each
//     row with shuffles and finalises it. No atomics, no shared memory, no workspace.
//   - kPackedBlock (rows of 9..64 chunks): the block's 64 quads hold whole rows; the block sums
//     them through shared memory and finalises them. No atomics, no workspace.
//   - kSplit (rows of more than 64 chunks): a pass is a tile of 64 chunks of one row; a block
//     sums its tiles of a row in registers and adds them to the row's DigestSlot with one atomic
//     when it leaves the row. The last contributor finalises and re-zeroes the slot.
//   - kEmpty (rows of 0 bytes): every row's digest is the final step of {0, 0}.
// The whole-buffer digest is the one-row case (so up to 64 KiB it is one block, no atomics).
#pragma once

#include <cstdint>

namespace detrace::kernels::detail {

inline constexpr int kChunkBytes = 1024;        // must equal kDigestChunkBytes (digest.h)
inline constexpr int kStripesPerChunk = 32;     // XXH64 stripes of 32 bytes per full chunk
inline constexpr int kBlockThreads = 256;
inline constexpr int kPassChunks = kBlockThreads / 4;  // 64 quads per block
inline constexpr int kWarpChunks = 8;                   // quads per warp

enum DigestMode : uint32_t { kEmpty = 0, kPackedWarp = 1, kPackedBlock = 2, kSplit = 3 };

// L2 prefetch: none; each full chunk just before it is loaded; or (kSplit only) the next pass's
// chunk while this pass's is hashed.
enum PrefetchMode : uint32_t { kPrefetchNone = 0, kPrefetchThisPass = 1, kPrefetchNextPass = 2 };

struct DigestParams {
  uint64_t base;            // device address of row 0
  uint64_t row_bytes;       // bytes per row (the whole length for a single buffer)
  uint64_t row_stride;      // bytes between row starts
  uint64_t out;             // device address of uint64_t[rows]: the digests
  uint64_t slots;           // device address of DigestSlot[rows] (kSplit only)
  uint64_t passes;          // block passes in all
  uint32_t rows;
  uint32_t chunks_per_row;  // G = ceil(row_bytes / 1024)
  uint32_t mode;            // DigestMode
  uint32_t align;           // 16, 8, 4 or 1: every chunk start is a multiple of it
  uint32_t rows_per_group;  // packed modes: rows in a warp (kPackedWarp) or block (kPackedBlock)
  uint32_t tiles_per_row;   // kSplit: ceil(G / 64)
  uint32_t prefetch;        // PrefetchMode
  // The *_via kernels only (graph replays): `out` is the device address of a word holding the
  // destination's base address (0: skip this digest), and the digests go to that base plus
  // out_offset words. The other kernels ignore it (0).
  uint32_t out_offset;
  uint32_t sched;           // SchedMode (kSplit only)
  uint32_t pad;
};

// Several digests in one launch (the *_many kernels, Digester::digestMany): blockIdx.y picks the
// digest, and each runs as if launched alone on gridDim.x blocks (gridDim.x is the largest grid any
// of them wants; the others' surplus blocks find no pass and return).
inline constexpr int kMaxBatch = 8;
struct DigestBatch {
  uint32_t count;
  uint32_t pad;
  DigestParams params[kMaxBatch];
  // Completion signal (0: none): the launch's last block to finish stores done_value to the word
  // at done_flag (mapped host memory), after every block's results are visible system-wide.
  // done_counter is a device uint32_t, zero before the launch and left zero after it, that the
  // blocks count themselves on; no other launch may use it while this one runs.
  uint64_t done_flag;
  uint64_t done_value;
  uint64_t done_counter;
};

// Which passes a kSplit block runs: kSchedStrided, passes blockIdx.x, + gridDim.x, ... (a row's
// tiles spread over many blocks, each leaving the row after one pass: a barrier and two atomics
// per pass); kSchedContiguous, one run of ceil(passes / grid) consecutive passes (a block leaves a
// row once per row it touches). Measured on the H200 (bench_kernels --digest, docs/digest.md):
// rows of 1 MiB 3.02-3.04 TB/s strided against 3.61-3.64 contiguous at 256 MiB, 3.16-3.23 against
// 3.97-4.01 at 1 GiB; one row (the whole-buffer digest) 3.57-3.67 / 3.94-4.02 strided against
// 3.61-3.67 / 3.98-4.00 contiguous. So contiguous for several rows, strided for one.
enum SchedMode : uint32_t { kSchedStrided = 0, kSchedContiguous = 1 };

// Stores of detrace_store_words: value[i] to the device word at addr[i], i < count. Used to point
// the *_via digests of a CUDA graph at the destination of one replay, before the graph runs.
inline constexpr int kMaxStores = 30;
struct StoreParams {
  uint32_t count;
  uint32_t pad;
  uint64_t addr[kMaxStores];
  uint64_t value[kMaxStores];
};

// Launches of at most this many passes (16 MiB) prefetch their chunks into L2: they are bound by
// latency and their data fits in L2 many times over. Larger ones have enough loads in flight
// without it and would only churn L2 (33 MiB of chunks are in progress at once at full occupancy).
inline constexpr uint64_t kPrefetchMaxPasses = 256;

// Whether larger launches prefetch too (each chunk just before it is loaded). Measured on the H200
// (bench_kernels, one run): slower, 3.23 against 3.60 TB/s at 256 MiB and 3.18 against 3.82 at
// 1 GiB; prefetching the next pass's chunk instead (DETRACE_DIGEST_PREFETCH=next) was slower
// still (2.41 and 2.46 TB/s). So off.
inline constexpr bool kDigestPrefetchAllDefault = false;

// Whether the 8-byte-aligned kernel is the variant with L2::256B load hints. Measured in the same
// run: 3.68 TB/s at 256 MiB and 4.03 TB/s at 1 GiB against 3.60 and 3.82 without, small calls
// unchanged within noise. So on.
inline constexpr bool kDigestL2HintDefault = true;

// Which kernel chunk starts aligned to 16 bytes get: the 16-byte loader (a quad reads two
// stripes, 64 contiguous bytes, per load and trades words by shuffles: half the L2 requests of
// the 8-byte loader). On the H200 a plain 16-byte read (bench_kernels --digest's read ceiling)
// reaches 4.2-4.4 TB/s at 256 MiB where the 8-byte digest reaches 3.6, and Nsight Compute found
// L2 the busiest unit of the 8-byte digest; the 16-byte loader reaches 3.84-3.89 TB/s
// (docs/digest.md).
inline constexpr const char* kDigestWideDefault = "detrace_digest_a16";

}  // namespace detrace::kernels::detail
