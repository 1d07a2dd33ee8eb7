// Host side of the GPU digest: loads the embedded fatbin with the driver API and enqueues the
// kernel. This code runs inside the traced process (the tracer calls it from its hooks), so it
// follows the tracer's rules: no allocation and no host synchronisation per call, no use of the
// CUDA runtime (the process's runtime state is left untouched), every failure returned as a Status.
#include "detrace/kernels/digest.h"

#include <algorithm>
#include <cstddef>

#include "digest_params.h"
#include "driver_api.h"

namespace detrace::kernels {
namespace detail {
// Defined in the generated digest_kernels_fatbin.cc (kernels/cmake/embed_binary.cmake).
extern const unsigned char kDigestFatbin[];
extern const std::size_t kDigestFatbinSize;
}  // namespace detail

namespace {

constexpr int kWarpThreads = 32;

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

// Fills the tiling fields of `p` from rows and row_bytes (see digest_params.h).
void planTiles(detail::DigestParams& p) {
  const uint64_t chunks = ceilDiv(p.row_bytes, kDigestChunkBytes);
  p.chunks_per_row = static_cast<uint32_t>(chunks);
  p.rows_per_tile = 0;
  p.tiles_per_row = 0;
  p.slices_per_tile = detail::kSlicesPerChunk;
  if (chunks == 0) {
    p.tiles = 0;
  } else if (chunks <= detail::kTileChunks) {
    p.rows_per_tile = static_cast<uint32_t>(detail::kTileChunks / chunks);
    p.tiles = ceilDiv(p.rows, p.rows_per_tile);
    if (chunks == 1) {
      p.slices_per_tile = static_cast<uint32_t>(ceilDiv(p.row_bytes, detail::kSliceBytes));
    }
  } else {
    p.tiles_per_row = static_cast<uint32_t>(ceilDiv(chunks, detail::kTileChunks));
    p.tiles = static_cast<uint64_t>(p.rows) * p.tiles_per_row;
  }
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
  DETRACE_CU_RETURN_IF_ERROR(cu, ModuleGetFunction(&d.kernel_, module, "detrace_digest"));
  // Each one-warp block stages 34 KB in shared memory: ask for the largest shared-memory carveout
  // so that several blocks fit on an SM (a hint; it only concerns this module's kernel).
  DETRACE_CU_RETURN_IF_ERROR(
      cu, FuncSetAttribute(d.kernel_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                           CU_SHAREDMEM_CARVEOUT_MAX_SHARED));
  CUdevice device = 0;
  DETRACE_CU_RETURN_IF_ERROR(cu, CtxGetDevice(&device));
  int sms = 0;
  DETRACE_CU_RETURN_IF_ERROR(
      cu, DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  int per_sm = 0;
  DETRACE_CU_RETURN_IF_ERROR(
      cu, OccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, d.kernel_, kWarpThreads, 0));
  d.grid_cap_ = std::max(1, sms * per_sm);
  return d;
}

Status Digester::launch(const void* params, uint64_t tiles, CUstream stream) const {
  const auto& p = *static_cast<const detail::DigestParams*>(params);
  uint64_t blocks = tiles;
  if (p.chunks_per_row == 0) blocks = ceilDiv(p.rows, kWarpThreads);
  blocks = std::clamp<uint64_t>(blocks, 1, static_cast<uint64_t>(grid_cap_));
  void* args[] = {const_cast<void*>(params)};
  DETRACE_CU_RETURN_IF_ERROR(*cu_, LaunchKernel(kernel_, static_cast<unsigned>(blocks), 1, 1,
                                                kWarpThreads, 1, 1, 0, stream, args, nullptr));
  return Status::ok();
}

Status Digester::digest(CUdeviceptr src, uint64_t len, DigestSlot* slot, CUstream stream,
                        uint64_t* out) const {
  if (slot == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digest needs a DigestSlot");
  }
  if (len != 0 && src == 0) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digest got a null source");
  }
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  detail::DigestParams p{};
  p.base = src;
  p.row_bytes = len;
  p.row_stride = 0;
  p.rows = 1;
  p.out = reinterpret_cast<uint64_t>(out != nullptr ? out : &slot->digest);
  p.slots = reinterpret_cast<uint64_t>(slot);
  planTiles(p);
  return launch(&p, p.tiles, stream);
}

Status Digester::digestRows(CUdeviceptr base, uint32_t rows, uint64_t row_bytes,
                            uint64_t row_stride, uint64_t* out, DigestSlot* workspace,
                            CUstream stream) const {
  if (rows == 0) return Status::ok();
  if (out == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestRows needs an output array");
  }
  if (row_bytes > kDigestRowBytesWithoutWorkspace && workspace == nullptr) {
    return makeError(ErrorCode::kInvalidArgument,
                     "rows of {} bytes need a workspace of {} zeroed DigestSlots (rows longer "
                     "than {} bytes are hashed by several warps)",
                     row_bytes, rows, kDigestRowBytesWithoutWorkspace);
  }
  if (row_bytes != 0 && base == 0) {
    return makeError(ErrorCode::kInvalidArgument, "Digester::digestRows got a null base");
  }
  if (row_bytes / kDigestChunkBytes >= (uint64_t{1} << 31)) {
    return makeError(ErrorCode::kInvalidArgument, "rows of {} bytes are too long", row_bytes);
  }
  DETRACE_RETURN_IF_ERROR(checkContext(*cu_, context_));
  detail::DigestParams p{};
  p.base = base;
  p.row_bytes = row_bytes;
  p.row_stride = row_stride;
  p.rows = rows;
  p.out = reinterpret_cast<uint64_t>(out);
  p.slots = reinterpret_cast<uint64_t>(workspace);
  planTiles(p);
  return launch(&p, p.tiles, stream);
}

}  // namespace detrace::kernels
