// Content fingerprints ("digests") of GPU buffers, computed on the GPU without disturbing the host
// process, and their CPU twins.
//
// Definition (also in docs/digest.md; the CPU twin below is the reference):
//   - The buffer of `len` bytes is cut into C = 1024-byte chunks; the last one may be partial.
//   - h_i = XXH64(bytes of chunk i, seed = i), standard XXH64, i the chunk index as uint64.
//   - S = sum of all h_i modulo 2^64. Integer addition is associative and commutative, so the GPU
//     may accumulate it with atomics in any order and still be bit-deterministic; the per-chunk seed
//     makes S sensitive to the order of chunks, and XXH64 to every bit and byte position.
//   - digest = XXH64 of the 16 little-endian bytes {S, len}, seed 0. An empty buffer has S = 0.
// Per-row digests: R rows of B bytes each, row r starting at base + r * row_stride bytes; row r's
// digest is the definition above applied to its B bytes. One launch computes all R rows.
//
// The GPU side runs inside someone else's process (the tracer's host), so it is written to leave
// no trace there: it goes through the CUDA driver API with its own module, loaded from a fatbin
// embedded in this library (the process's CUDA runtime never sees it); a call allocates nothing,
// never synchronises the host, only enqueues one kernel on the caller's stream (so it can be
// captured into a CUDA graph), and writes its result to caller-provided device or mapped memory.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "detrace/base/scoped.h"
#include "detrace/base/status.h"

namespace detrace::kernels {

inline constexpr uint64_t kDigestChunkBytes = 1024;

// Rows longer than this (64 chunks) are hashed by several blocks that meet through a DigestSlot
// (atomics); shorter rows are finished inside one block and need no workspace.
inline constexpr uint64_t kDigestRowBytesWithoutWorkspace = 64 * kDigestChunkBytes;

// Accumulator of one digest in device memory. The caller zero-initialises it ONCE; every launch
// leaves sum and done_chunks at zero again when it finishes (the last contributor resets them), so
// a slot can be reused by later launches on the same stream without a memset. A slot must not be
// used by two launches that may run concurrently. If a launch is aborted (a sticky CUDA error) the
// slot must be zeroed again.
struct DigestSlot {
  uint64_t sum;          // running sum of chunk hashes (mod 2^64)
  uint32_t done_chunks;  // chunks accounted for so far
  uint32_t pad;
  uint64_t digest;       // the result, unless the call names another destination
};
static_assert(sizeof(DigestSlot) == 24, "DigestSlot is shared with device code");

// XXH64 of the 16 little-endian bytes {sum, len}, seed 0: the last step of the definition.
uint64_t digestFinalCpu(uint64_t sum, uint64_t len);

// CPU twin of Digester::digest (uses libxxhash).
uint64_t digestCpu(const void* data, size_t len);

// CPU twin of Digester::digestRows: out[r] = digestCpu(base + r * row_stride, row_bytes).
void digestRowsCpu(const void* base, uint32_t rows, uint64_t row_bytes, uint64_t row_stride,
                   uint64_t* out);

// The whole digest the tracer records for an operand with per-row digests: XXH64 of the row
// digests (little-endian uint64s), seed = their number.
uint64_t wholeOfRowsCpu(const uint64_t* row_digests, size_t rows);

// One digest of a Digester::digestMany batch: a whole buffer (rows == 0: [base, base + bytes), as
// Digester::digest, written to `out` or else slot->digest) or per-row digests (rows > 0: as
// Digester::digestRows, `row_bytes`/`row_stride`, written to out[0..rows), `slot` the workspace).
struct DigestRequest {
  CUdeviceptr base = 0;
  uint64_t bytes = 0;
  uint32_t rows = 0;
  uint64_t row_bytes = 0;
  uint64_t row_stride = 0;
  uint64_t* out = nullptr;
  DigestSlot* slot = nullptr;
  uint32_t out_offset = 0;  // digestManyVia only: where in the replay's destination (in words)
  // digestManyVia only: the cell this request reads its destination's base from, when not the
  // call's (its blocks return at once when it holds 0, whatever the other requests' cells hold).
  const uint64_t* out_cell = nullptr;
};

// The completion signal of a Digester::digestMany batch: `value` is stored to `flag` (mapped host
// memory) once all its digests are visible to the host. `counter` is a device uint32_t that is
// zero and that no other launch in flight uses (the kernel leaves it zero).
struct DoneSignal {
  volatile uint64_t* flag = nullptr;  // the device address of the mapped word
  uint64_t value = 0;
  uint32_t* counter = nullptr;
};

namespace detail {
struct DriverApi;
void unloadModule(CUmodule m);  // through the driver entry points digest.cc resolved
}  // namespace detail

// Launches the digest kernels of one CUDA context (the one current at create()). Thread-safe for
// concurrent calls (it holds no mutable state); calls must come from a thread where that same
// context is current.
class Digester {
 public:
  // Loads the embedded module into the current context. Fails with kUnavailable when there is no
  // CUDA driver (it is loaded at run time: the library itself does not link libcuda), no context
  // is current, or the driver cannot load sm_90/compute_90 code.
  static Result<Digester> create();

  // Enqueues the digest of [src, src + len) on `stream`. `slot` is device memory, zeroed once by
  // the caller (see DigestSlot). The digest is written to `out` (device or mapped host memory) when
  // given, else to slot->digest. Any alignment of src is accepted (unaligned is slower).
  Status digest(CUdeviceptr src, uint64_t len, DigestSlot* slot, CUstream stream,
                uint64_t* out = nullptr) const;

  // Enqueues the digests of `rows` rows of `row_bytes` bytes, row r at base + r * row_stride (any
  // alignment, any stride); out[r] receives row r's digest. `workspace` must point to `rows`
  // zero-initialised DigestSlots when row_bytes > kDigestRowBytesWithoutWorkspace, and may be null
  // otherwise; like a DigestSlot it is left zeroed for reuse.
  Status digestRows(CUdeviceptr base, uint32_t rows, uint64_t row_bytes, uint64_t row_stride,
                    uint64_t* out, DigestSlot* workspace, CUstream stream) const;

  // Enqueues up to kMaxBatch digests (whole buffers and row sets, mixed) with the host cost of one
  // launch per alignment class among them (16, 8, 4, 1: one launch when every base and row stride
  // is a multiple of 16, the usual case for tensors; two when some are multiples of 8 only): the
  // same results as digest() / digestRows() called one by one.
  // Each request needs its own slot or workspace where it uses one (shared ones are refused): a
  // whole buffer longer than kDigestRowBytesWithoutWorkspace bytes keeps its sums there, and one
  // without an `out` its result; a shorter one with an `out`, and rows no longer than that, never
  // touch it. Nothing is enqueued if any request is invalid. `enqueued`, when given, gets a bit per request whose kernel was
  // enqueued: all of them on success, possibly some when a later launch of the batch failed.
  // `done`, when given, is how the host learns that the whole batch has finished without an event:
  // the last launch stores done->value to done->flag when every digest of the batch is written
  // and visible to the host (launches on one stream run in order, so earlier ones have finished).
  static constexpr uint32_t kMaxBatch = 8;
  Status digestMany(const DigestRequest* requests, uint32_t n, CUstream stream,
                    uint32_t* enqueued = nullptr, const DoneSignal* done = nullptr) const;

  // ---- CUDA graph replays ----
  // digest() and digestRows() with the destination read when the kernel runs: `out_cell` is a
  // device word holding the base address (device or mapped host memory) of the destination, and
  // the digests go to that base plus `out_offset` uint64_t words; a base of 0 skips the digest
  // (the kernel returns at once). For launches captured into a CUDA graph: the captured kernels
  // keep their parameters at every replay, and storeWords() before each replay points them at that
  // replay's results. `slot` / `workspace` as above (each captured call needs its own: replays of
  // one graph run one after another, so its slots are reused in order).
  Status digestVia(CUdeviceptr src, uint64_t len, DigestSlot* slot, const uint64_t* out_cell,
                   uint32_t out_offset, CUstream stream) const;
  Status digestRowsVia(CUdeviceptr base, uint32_t rows, uint64_t row_bytes, uint64_t row_stride,
                       const uint64_t* out_cell, uint32_t out_offset, DigestSlot* workspace,
                       CUstream stream) const;

  // digestMany for launches captured into a CUDA graph: the digests of request i go to the base
  // held in `out_cell` (read when the kernel runs; 0 skips them) plus requests[i].out_offset words;
  // requests[i].out is ignored; a request with its own out_cell reads that one instead (so that
  // its digest can be skipped on replays where the others are taken). One launch per alignment
  // class among the requests (one for tensors), where digestVia / digestRowsVia would make one
  // per request: a captured call's inputs become one graph node, and its outputs another.
  // `launches`, when given, gets the number of launches enqueued. Slots and workspaces as for
  // digestMany (the cell being every request's destination, a whole buffer of at most
  // kDigestRowBytesWithoutWorkspace bytes never touches its slot, so such requests may share one).
  Status digestManyVia(const DigestRequest* requests, uint32_t n, const uint64_t* out_cell,
                       CUstream stream, uint32_t* launches = nullptr) const;

  // Enqueues a small kernel on `stream` that stores values[i] to the device word addr[i], for
  // i < n (one launch per kMaxStores words): how the destinations of the *Via digests are set,
  // stream-ordered, before a graph replay and cleared after it.
  static constexpr uint32_t kMaxStores = 30;
  Status storeWords(const uint64_t* const* addr, const uint64_t* values, uint32_t n,
                    CUstream stream) const;

  // Largest grid (resident 256-thread blocks) the 16-byte-aligned kernel is launched with (for
  // tests and benchmarks).
  int gridCap() const { return kernels_.grid_caps[0]; }

 private:
  static constexpr int kAlignments = 4;  // kernels for chunk starts aligned to 16, 8, 4 and 1 bytes

  // One entry point per alignment, and the largest grid each is launched with.
  struct Kernels {
    CUfunction fns[kAlignments] = {};
    int grid_caps[kAlignments] = {};
  };

  Digester() = default;
  Status loadKernels(const char* const (&names)[kAlignments], int sms, Kernels& out);
  Status launch(const Kernels& kernels, const void* params, CUstream stream) const;
  // A batch of requests planned into one DigestBatch per alignment class (digestMany and
  // digestManyVia); with `via_cell`, each request's destination is that cell and its out_offset,
  // not its out.
  struct PlannedBatches;
  Status planBatches(const char* who, const DigestRequest* requests, uint32_t n,
                     const Kernels& kernels, const uint64_t* via_cell, PlannedBatches& out) const;

  const detail::DriverApi* cu_ = nullptr;  // driver entry points (resolved at run time)
  ScopedResource<CUmodule, detail::unloadModule> module_;
  Kernels kernels_;
  Kernels via_kernels_;  // the *_via entry points (graph replays)
  Kernels many_kernels_;  // the *_many entry points (digestMany)
  Kernels many_via_kernels_;  // the *_many_via entry points (digestManyVia)
  CUfunction store_words_ = nullptr;
  CUcontext context_ = nullptr;
};

}  // namespace detrace::kernels
