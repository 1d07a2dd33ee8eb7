// Host side of the GPU digest: loads the embedded fatbin with the driver API and enqueues the
// kernel. This code runs inside the traced process (the tracer calls it from its hooks), so it
// follows the tracer's rules: no allocation and no host synchronisation per call, no use of the
// CUDA runtime (the process's runtime state is left untouched), every failure returned as a Status.
#include "detrace/kernels/digest.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "digest_params.h"
#include "driver_api.h"

namespace detrace::kernels {
namespace detail {
// Defined in the generated digest_kernels_fatbin.cc (kernels/cmake/embed_binary.cmake).
extern const unsigned char kDigestFatbin[];
extern const std::size_t kDigestFatbinSize;
}  // namespace detail

namespace {

static_assert(detail::kChunkBytes == kDigestChunkBytes, "digest_params.h and digest.h disagree");
static_assert(kDigestRowBytesWithoutWorkspace == detail::kPassChunks * kDigestChunkBytes,
              "rows up to one block pass are finished without a workspace");

Status checkContext(const detail::DriverApi& cu, CUcontext expected) {
  CUcontext current = nullptr;
  DETRACE_CU_RETURN_IF_ERROR(cu, CtxGetCurrent(&current));
  if (current != expected) {
    return makeError(ErrorCode::kInvalidArgument,
                     "the Digester was created in another CUDA context than the current one: "
                     "create one Digester per context");
  }
  return Status::ok();
}

uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Tuning switches read once from the environment (for measuring variants side by side with
// bench_kernels; the defaults are the measured best, see docs/digest.md):
//   DETRACE_DIGEST_PREFETCH=small|all|next  L2 prefetch: launches of at most kPrefetchMaxPasses
//       passes only (small), every launch (all), or small launches as before and in larger split
//       launches the next pass's chunk while hashing this one (next)
//   DETRACE_DIGEST_L2HINT=0|1               8-byte loads with the L2::256B hint
//   DETRACE_DIGEST_WIDE=0|1|deep            16-byte loads where chunk starts allow them (1, or
//       deep: more loads in flight at 3 blocks per SM); 0 gives them the 8-byte kernel
enum class PrefetchPolicy { kSmall, kAll, kNext };

PrefetchPolicy prefetchPolicyFromEnv() {
  const char* e = std::getenv("DETRACE_DIGEST_PREFETCH");
  if (e == nullptr || *e == '\0') return detail::kDigestPrefetchAllDefault ? PrefetchPolicy::kAll
                                                                          : PrefetchPolicy::kSmall;
  if (std::strcmp(e, "all") == 0) return PrefetchPolicy::kAll;
  if (std::strcmp(e, "next") == 0) return PrefetchPolicy::kNext;
  return PrefetchPolicy::kSmall;
}

PrefetchPolicy prefetchPolicy() {
  static const PrefetchPolicy policy = prefetchPolicyFromEnv();
  return policy;
}

// DETRACE_DIGEST_SCHED=strided|contiguous forces one pass order for every kSplit launch (for
// measurements); by default several rows are contiguous and one row is strided (digest_params.h).
int schedFromEnv() {
  const char* e = std::getenv("DETRACE_DIGEST_SCHED");
  if (e != nullptr && std::strcmp(e, "strided") == 0) return detail::kSchedStrided;
  if (e != nullptr && std::strcmp(e, "contiguous") == 0) return detail::kSchedContiguous;
  return -1;
}

uint32_t splitSched(uint32_t rows) {
  static const int forced = schedFromEnv();
  if (forced >= 0) return static_cast<uint32_t>(forced);
  return rows > 1 ? detail::kSchedContiguous : detail::kSchedStrided;
}

bool l2HintLoads() {
  const char* e = std::getenv("DETRACE_DIGEST_L2HINT");
  if (e == nullptr || *e == '\0') return detail::kDigestL2HintDefault;
  return std::strcmp(e, "0") != 0;
}

// The 16-byte-aligned kernel's name stem: the 16-byte loader ("detrace_digest_a16"), its variant
// with more loads in flight at 3 blocks per SM ("detrace_digest_a16_deep"), or the 8-byte one.
std::string wideStem(const std::string& a8) {
  const char* e = std::getenv("DETRACE_DIGEST_WIDE");
  const std::string v = e != nullptr ? e : "";
  if (v == "0") return a8;
  if (v == "deep") return "detrace_digest_a16_deep";
  if (v == "1") return "detrace_digest_a16";
  return detail::kDigestWideDefault;
}

// Fills the mode and pass fields of `p` from rows, row_bytes, base and row_stride (see
// digest_params.h). Pure arithmetic: this runs on every call.
void planPasses(detail::DigestParams& p) {
  const uint64_t g = ceilDiv(p.row_bytes, kDigestChunkBytes);
  p.chunks_per_row = static_cast<uint32_t>(g);
  p.rows_per_group = 0;
  p.tiles_per_row = 0;
  if (g == 0) {
    p.mode = detail::kEmpty;
    p.passes = ceilDiv(p.rows, detail::kBlockThreads);
  } else if (g <= detail::kWarpChunks) {
    p.mode = detail::kPackedWarp;
    p.rows_per_group = static_cast<uint32_t>(detail::kWarpChunks / g);
    const uint64_t warps_per_block = detail::kBlockThreads / 32;
    p.passes = ceilDiv(p.rows, warps_per_block * p.rows_per_group);
  } else if (g <= detail::kPassChunks) {
    p.mode = detail::kPackedBlock;
    p.rows_per_group = static_cast<uint32_t>(detail::kPassChunks / g);
    p.passes = ceilDiv(p.rows, p.rows_per_group);
  } else {
    p.mode = detail::kSplit;
    p.tiles_per_row = static_cast<uint32_t>(ceilDiv(g, detail::kPassChunks));
    p.passes = static_cast<uint64_t>(p.rows) * p.tiles_per_row;
    p.sched = splitSched(p.rows);
  }
  // Chunk starts are base + r * row_stride + i * 1024: their common alignment is base's and,
  // with more than one row, row_stride's.
  const uint64_t bits = p.base | (p.rows > 1 ? p.row_stride : 0);
  p.align = bits % 16 == 0 ? 16u : bits % 8 == 0 ? 8u : bits % 4 == 0 ? 4u : 1u;
  const PrefetchPolicy policy = prefetchPolicy();
  if (p.passes <= detail::kPrefetchMaxPasses || policy == PrefetchPolicy::kAll) {
    p.prefetch = detail::kPrefetchThisPass;
  } else if (policy == PrefetchPolicy::kNext) {
    p.prefetch = p.mode == detail::kSplit ? detail::kPrefetchNextPass : detail::kPrefetchThisPass;
  } else {
    p.prefetch = detail::kPrefetchNone;
  }
}

// The kernel of an alignment (16, 8, 4, 1) in each Kernels set.
int alignmentIndex(uint32_t align) {
  return align == 16 ? 0 : align == 8 ? 1 : align == 4 ? 2 : 3;
}

// Blocks for `passes` passes with at most `cap` resident: as few rounds as the cap allows, and the
// passes spread evenly over the blocks (4096 passes on a cap of 528: 512 blocks x 8, not 528
// blocks of which 400 run an eighth pass while the others idle).
uint64_t gridFor(uint64_t passes, uint64_t cap) {
  if (passes <= cap) return std::max<uint64_t>(passes, 1);
  return ceilDiv(passes, ceilDiv(passes, cap));
}

// The checks and launch parameters shared by digestRows and digestRowsVia (`out` left to them).
Status planRows(const char* who, CUdeviceptr base, uint32_t rows, uint64_t row_bytes,
                uint64_t row_stride, DigestSlot* workspace, detail::DigestParams& p) {
  if (row_bytes > kDigestRowBytesWithoutWorkspace && workspace == nullptr) {
    return makeError(ErrorCode::kInvalidArgument,
                     "rows of {} bytes need a workspace of {} zeroed DigestSlots (rows longer "
                     "than {} bytes are hashed by several blocks)",
                     row_bytes, rows, kDigestRowBytesWithoutWorkspace);
  }
  if (row_bytes != 0 && base == 0) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::{} got a null base", who);
  }
  if (row_bytes / kDigestChunkBytes >= (uint64_t{1} << 31)) {
    return makeError(ErrorCode::kInvalidArgument, "rows of {} bytes are too long", row_bytes);
  }
  p.base = base;
  p.row_bytes = row_bytes;
  p.row_stride = row_stride;
  p.rows = rows;
  p.slots = reinterpret_cast<uint64_t>(workspace);
  planPasses(p);
  return Status::ok();
}

// The one-row launch of a whole-buffer digest (digest, digestVia); `who` names the caller.
Status planWhole(const char* who, CUdeviceptr src, uint64_t len, DigestSlot* slot,
                 detail::DigestParams& p) {
  if (slot == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::{} needs a DigestSlot", who);
  }
  if (len != 0 && src == 0) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::{} got a null source", who);
  }
  p.base = src;
  p.row_bytes = len;
  p.row_stride = 0;
  p.rows = 1;
  p.slots = reinterpret_cast<uint64_t>(slot);
  planPasses(p);
  return Status::ok();
}

// Whether a request of a batch uses its slot or workspace: a whole buffer or rows longer than one
// block pass (smaller ones are finished by a single block, without atomics on a slot).
bool usesSlot(const DigestRequest& r) {
  return r.slot != nullptr && (r.rows == 0 ? r.bytes : r.row_bytes) > kDigestRowBytesWithoutWorkspace;
}

}  // namespace

namespace detail {
void unloadModule(CUmodule m) {
  auto api = driverApi();
  if (api.isOk()) (void)(*api)->ModuleUnload(m);
}
}  // namespace detail

Result<Digester> Digester::create() {
  DETRACE_ASSIGN_OR_RETURN(const detail::DriverApi* api, detail::driverApi());
  const detail::DriverApi& cu = *api;
  DETRACE_CU_RETURN_IF_ERROR(cu, Init(0));
  Digester d;
  d.cu_ = api;
  DETRACE_CU_RETURN_IF_ERROR(cu, CtxGetCurrent(&d.context_));
  if (d.context_ == nullptr) {
    return makeError(ErrorCode::kUnavailable,
                     "no CUDA context is current: make one current (cudaSetDevice + cudaFree(0), "
                     "or cuCtxSetCurrent) before creating a Digester");
  }
  CUmodule module = nullptr;
  DETRACE_CU_RETURN_IF_ERROR(cu, ModuleLoadData(&module, detail::kDigestFatbin));
  d.module_.reset(module);
  CUdevice device = 0;
  DETRACE_CU_RETURN_IF_ERROR(cu, CtxGetDevice(&device));
  int sms = 0;
  DETRACE_CU_RETURN_IF_ERROR(
      cu, DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  // Each set's 8-byte-aligned kernel is its L2::256B-hint variant unless DETRACE_DIGEST_L2HINT=0;
  // its 16-byte-aligned one the 16-byte loader unless DETRACE_DIGEST_WIDE=0 (then the 8-byte one).
  const std::string a8 = l2HintLoads() ? "detrace_digest_a8_l2hint" : "detrace_digest_a8";
  const std::string a16 = wideStem(a8);
  auto names_with = [&](const std::string& suffix, std::string (&out)[kAlignments]) {
    out[0] = a16 + suffix;
    out[1] = a8 + suffix;
    out[2] = "detrace_digest_a4" + suffix;
    out[3] = "detrace_digest_a1" + suffix;
  };
  auto load = [&](const std::string& suffix, Kernels& out) {
    std::string names[kAlignments];
    names_with(suffix, names);
    const char* const c_names[kAlignments] = {names[0].c_str(), names[1].c_str(), names[2].c_str(),
                                              names[3].c_str()};
    return d.loadKernels(c_names, sms, out);
  };
  DETRACE_RETURN_IF_ERROR(load("", d.kernels_));
  DETRACE_RETURN_IF_ERROR(load("_via", d.via_kernels_));
  DETRACE_RETURN_IF_ERROR(load("_many", d.many_kernels_));
  DETRACE_RETURN_IF_ERROR(load("_many_via", d.many_via_kernels_));
  DETRACE_CU_RETURN_IF_ERROR(cu, ModuleGetFunction(&d.store_words_, module, "detrace_store_words"));
  return d;
}

Status Digester::loadKernels(const char* const (&names)[kAlignments], int sms, Kernels& out) {
  for (int a = 0; a < kAlignments; ++a) {
    DETRACE_CU_RETURN_IF_ERROR(*cu_, ModuleGetFunction(&out.fns[a], module_.get(), names[a]));
    int per_sm = 0;
    DETRACE_CU_RETURN_IF_ERROR(*cu_, OccupancyMaxActiveBlocksPerMultiprocessor(
                                         &per_sm, out.fns[a], detail::kBlockThreads, 0));
    out.grid_caps[a] = std::max(1, sms * per_sm);
  }
  return Status::ok();
}

Status Digester::launch(const Kernels& kernels, const void* params, CUstream stream) const {
  const auto& p = *static_cast<const detail::DigestParams*>(params);
  const int a = alignmentIndex(p.align);
  // A persistent grid: blocks loop over passes, so more blocks than are resident buy nothing.
  const uint64_t blocks = gridFor(p.passes, static_cast<uint64_t>(kernels.grid_caps[a]));
  void* args[] = {const_cast<void*>(params)};
  DETRACE_CU_RETURN_IF_ERROR(*cu_, LaunchKernel(kernels.fns[a], static_cast<unsigned>(blocks), 1,
                                                1, detail::kBlockThreads, 1, 1, 0, stream, args,
                                                nullptr));
  return Status::ok();
}

Status Digester::digest(CUdeviceptr src, uint64_t len, DigestSlot* slot, CUstream stream,
                        uint64_t* out) const {
  detail::DigestParams p{};
  DETRACE_RETURN_IF_ERROR(planWhole("digest", src, len, slot, p));
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  p.out = reinterpret_cast<uint64_t>(out != nullptr ? out : &slot->digest);
  return launch(kernels_, &p, stream);
}

Status Digester::digestRows(CUdeviceptr base, uint32_t rows, uint64_t row_bytes,
                            uint64_t row_stride, uint64_t* out, DigestSlot* workspace,
                            CUstream stream) const {
  if (rows == 0) return Status::ok();
  if (out == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestRows needs an output array");
  }
  detail::DigestParams p{};
  DETRACE_RETURN_IF_ERROR(planRows("digestRows", base, rows, row_bytes, row_stride, workspace, p));
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  p.out = reinterpret_cast<uint64_t>(out);
  return launch(kernels_, &p, stream);
}

struct Digester::PlannedBatches {
  detail::DigestBatch batches[kAlignments];
  uint32_t members[kAlignments] = {};  // which requests each launch holds (bits)
  uint64_t blocks[kAlignments] = {};
};

Status Digester::planBatches(const char* who, const DigestRequest* requests, uint32_t n,
                             const Kernels& kernels, const uint64_t* via_cell,
                             PlannedBatches& out) const {
  static_assert(kMaxBatch == static_cast<uint32_t>(detail::kMaxBatch),
                "digest.h and digest_params.h disagree");
  if (n > kMaxBatch) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::{} takes at most {} digests, not {}",
                     who, kMaxBatch, n);
  }
  if (n > 0 && requests == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::{} got no requests", who);
  }
  // A slot is used for its sums, or for the result of a whole buffer without another destination.
  auto uses = [via_cell](const DigestRequest& q) {
    return usesSlot(q) || (q.slot != nullptr && q.rows == 0 && q.out == nullptr && via_cell == nullptr);
  };
  // Planned first, all of them: an invalid request enqueues nothing. A batch is cleared when its
  // alignment is first met (the launch's parameters are copied whole; most batches use one).
  for (uint32_t i = 0; i < n; ++i) {
    const DigestRequest& r = requests[i];
    // In one launch two digests sharing a slot or workspace would add into each other's sums.
    for (uint32_t j = 0; j < i; ++j) {
      if (uses(r) && uses(requests[j]) && r.slot == requests[j].slot) {
        return makeError(ErrorCode::kInvalidArgument,
                         "Digester::{}: requests {} and {} share a slot or workspace", who, j, i);
      }
    }
    detail::DigestParams p{};
    if (r.rows == 0) {
      DETRACE_RETURN_IF_ERROR(planWhole(who, r.base, r.bytes, r.slot, p));
      p.out = reinterpret_cast<uint64_t>(r.out != nullptr ? r.out : &r.slot->digest);
    } else {
      if (r.out == nullptr && via_cell == nullptr) {
        return makeError(ErrorCode::kInvalidArgument, "Digester::{}: rows need an output array", who);
      }
      DETRACE_RETURN_IF_ERROR(planRows(who, r.base, r.rows, r.row_bytes, r.row_stride, r.slot, p));
      p.out = reinterpret_cast<uint64_t>(r.out);
    }
    if (via_cell != nullptr) {
      p.out = reinterpret_cast<uint64_t>(r.out_cell != nullptr ? r.out_cell : via_cell);
      p.out_offset = r.out_offset;
    }
    const int a = alignmentIndex(p.align);
    detail::DigestBatch& b = out.batches[a];
    if (out.members[a] == 0) b = detail::DigestBatch{};
    b.params[b.count++] = p;
    out.members[a] |= 1u << i;
    out.blocks[a] = std::max(out.blocks[a], gridFor(p.passes, static_cast<uint64_t>(kernels.grid_caps[a])));
  }
  return Status::ok();
}

Status Digester::digestMany(const DigestRequest* requests, uint32_t n, CUstream stream,
                            uint32_t* enqueued, const DoneSignal* done) const {
  if (enqueued != nullptr) *enqueued = 0;
  PlannedBatches plan;
  DETRACE_RETURN_IF_ERROR(planBatches("digestMany", requests, n, many_kernels_, nullptr, plan));
  if (n == 0) return Status::ok();
  if (done != nullptr && (done->flag == nullptr || done->counter == nullptr)) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestMany: a done signal needs a flag and a counter");
  }
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  int last = 0;  // the batch's last launch carries the done signal
  for (int a = 0; a < kAlignments; ++a) {
    if (plan.members[a] != 0) last = a;
  }
  if (done != nullptr) {
    plan.batches[last].done_flag = reinterpret_cast<uint64_t>(done->flag);
    plan.batches[last].done_value = done->value;
    plan.batches[last].done_counter = reinterpret_cast<uint64_t>(done->counter);
  }
  for (int a = 0; a < kAlignments; ++a) {
    if (plan.members[a] == 0) continue;
    void* args[] = {&plan.batches[a]};
    DETRACE_CU_RETURN_IF_ERROR(*cu_, LaunchKernel(many_kernels_.fns[a], static_cast<unsigned>(plan.blocks[a]),
                                                  plan.batches[a].count, 1, detail::kBlockThreads, 1, 1,
                                                  0, stream, args, nullptr));
    if (enqueued != nullptr) *enqueued |= plan.members[a];
  }
  return Status::ok();
}

Status Digester::digestManyVia(const DigestRequest* requests, uint32_t n, const uint64_t* out_cell,
                               CUstream stream, uint32_t* launches) const {
  if (launches != nullptr) *launches = 0;
  if (out_cell == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestManyVia needs an out cell");
  }
  PlannedBatches plan;
  DETRACE_RETURN_IF_ERROR(planBatches("digestManyVia", requests, n, many_via_kernels_, out_cell, plan));
  if (n == 0) return Status::ok();
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  for (int a = 0; a < kAlignments; ++a) {
    if (plan.members[a] == 0) continue;
    void* args[] = {&plan.batches[a]};
    DETRACE_CU_RETURN_IF_ERROR(*cu_, LaunchKernel(many_via_kernels_.fns[a],
                                                  static_cast<unsigned>(plan.blocks[a]),
                                                  plan.batches[a].count, 1, detail::kBlockThreads,
                                                  1, 1, 0, stream, args, nullptr));
    if (launches != nullptr) ++*launches;
  }
  return Status::ok();
}

// ---- CUDA graph replays: the *_via entry points and detrace_store_words ----

Status Digester::digestVia(CUdeviceptr src, uint64_t len, DigestSlot* slot,
                           const uint64_t* out_cell, uint32_t out_offset, CUstream stream) const {
  if (out_cell == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestVia needs an out cell");
  }
  detail::DigestParams p{};
  DETRACE_RETURN_IF_ERROR(planWhole("digestVia", src, len, slot, p));
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  p.out = reinterpret_cast<uint64_t>(out_cell);
  p.out_offset = out_offset;
  return launch(via_kernels_, &p, stream);
}

Status Digester::digestRowsVia(CUdeviceptr base, uint32_t rows, uint64_t row_bytes,
                               uint64_t row_stride, const uint64_t* out_cell, uint32_t out_offset,
                               DigestSlot* workspace, CUstream stream) const {
  if (rows == 0) return Status::ok();
  if (out_cell == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestRowsVia needs an out cell");
  }
  detail::DigestParams p{};
  DETRACE_RETURN_IF_ERROR(planRows("digestRowsVia", base, rows, row_bytes, row_stride, workspace, p));
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  p.out = reinterpret_cast<uint64_t>(out_cell);
  p.out_offset = out_offset;
  return launch(via_kernels_, &p, stream);
}

Status Digester::storeWords(const uint64_t* const* addr, const uint64_t* values, uint32_t n,
                            CUstream stream) const {
  static_assert(kMaxStores == static_cast<uint32_t>(detail::kMaxStores),
                "digest.h and digest_params.h disagree");
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  for (uint32_t first = 0; first < n; first += kMaxStores) {
    detail::StoreParams p{};
    p.count = std::min(kMaxStores, n - first);
    for (uint32_t i = 0; i < p.count; ++i) {
      p.addr[i] = reinterpret_cast<uint64_t>(addr[first + i]);
      p.value[i] = values[first + i];
    }
    void* args[] = {&p};
    DETRACE_CU_RETURN_IF_ERROR(*cu_, LaunchKernel(store_words_, 1, 1, 1, 32, 1, 1, 0, stream,
                                                  args, nullptr));
  }
  return Status::ok();
}

}  // namespace detrace::kernels
