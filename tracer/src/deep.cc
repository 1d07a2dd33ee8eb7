// See deep.h.
#include "deep.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "detrace/db/writer.h"
#include "detrace/tracer/allocation_map.h"
#include "detrace/tracer/lasting_thread_local.h"
#include "detrace/tracer/launch_params.h"
#include "detrace/tracer/look_back.h"
#include "detrace/tracer/operand_specs.h"

#include "fingerprinter.h"
#include "log.h"
#include "next_symbol.h"
#include "own_stream.h"
#include "relaxed_capture.h"
#include "self_launch.h"
#include "session.h"

namespace detrace::tracer::deep {
namespace {

constexpr size_t kMaxLayouts = size_t{1} << 16;  // kernels whose parameter layout is remembered
constexpr size_t kMaxTargets = 64;               // allocations digested per launch
// Mapped pieces (PyTorch's expandable segments map 2 or 20 MiB at a time) are merged into the
// contiguous run around a pointer up to this size: a tensor may span pieces, and a bound keeps
// lookups and digests cheap.
constexpr uint64_t kMaxMergedBytes = uint64_t{256} << 20;

// Driver entry points deep mode calls, found in the program's libcuda.
struct Driver {
  using ParamInfo = CUresult (*)(void*, size_t, size_t*, size_t*);
  using MemsetD8Async = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
  using CtxGet = CUresult (*)(CUcontext*);
  using CtxDevice = CUresult (*)(CUdevice*);
  using StreamSync = CUresult (*)(CUstream);
  using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  using GetName = CUresult (*)(const char**, void*);
  ParamInfo func_param_info = nullptr;    // cuFuncGetParamInfo (CUDA 12.4+)
  ParamInfo kernel_param_info = nullptr;  // cuKernelGetParamInfo
  GetName func_name = nullptr;            // cuFuncGetName (CUDA 12.3+)
  GetName kernel_name = nullptr;          // cuKernelGetName
  MemsetD8Async memset_d8_async = nullptr;
  CtxGet ctx_get = nullptr;
  CtxDevice ctx_device = nullptr;
  StreamSync stream_sync = nullptr;
  IsCapturing is_capturing = nullptr;
  AddressRange address_range = nullptr;

  static const Driver& get() {
    static const Driver d = [] {
      Driver x;
      auto sym = [](const char* n) { return loadedSymbol(n, "libcuda.so"); };
      x.func_param_info = reinterpret_cast<ParamInfo>(sym("cuFuncGetParamInfo"));
      x.kernel_param_info = reinterpret_cast<ParamInfo>(sym("cuKernelGetParamInfo"));
      x.func_name = reinterpret_cast<GetName>(sym("cuFuncGetName"));
      x.kernel_name = reinterpret_cast<GetName>(sym("cuKernelGetName"));
      x.memset_d8_async = reinterpret_cast<MemsetD8Async>(sym("cuMemsetD8Async"));
      x.ctx_get = reinterpret_cast<CtxGet>(sym("cuCtxGetCurrent"));
      x.ctx_device = reinterpret_cast<CtxDevice>(sym("cuCtxGetDevice"));
      x.stream_sync = reinterpret_cast<StreamSync>(sym("cuStreamSynchronize"));
      x.is_capturing = reinterpret_cast<IsCapturing>(sym("cuStreamIsCapturing"));
      x.address_range = reinterpret_cast<AddressRange>(sym("cuMemGetAddressRange_v2"));
      return x;
    }();
    return d;
  }
};

struct Counters {
  std::atomic<int64_t> launches{0}, targets{0}, digested_bytes{0}, no_layout{0}, host_ns{0};
  std::atomic<int64_t> params_too_large{0}, params_missing{0}, no_params{0}, words_ignored{0};
  std::atomic<int64_t> zero_filled_bytes{0}, zero_fill_failed{0};
  std::atomic<int64_t> zero_fill_skipped_capture{0}, zero_fill_skipped_managed{0};
  std::atomic<int64_t> allocations_seen{0}, frees_seen{0}, maps_seen{0}, imports_seen{0};
  std::atomic<int64_t> speculative{0}, speculative_kept{0};
};

Counters& counters() {
  static Counters* c = new Counters();  // never destroyed: used from exit handlers
  return *c;
}

AllocationMap& allocations() {
  static AllocationMap* m = new AllocationMap();
  return *m;
}

// ---- parameter layouts, per function (the driver answers the same every time) ----

// What the driver says of a function's parameters.
enum class Layout : uint8_t {
  kKnown,    // its layout (at least one parameter)
  kNone,     // a kernel without parameters: nothing to fingerprint
  kUnknown,  // neither query knows the handle (no cuFuncGetParamInfo before CUDA 12.4, ...)
};

struct CachedLayout {
  Layout answer = Layout::kUnknown;
  std::vector<ParamInfo> params;
};

std::mutex g_layout_mu;
std::unordered_map<void*, CachedLayout>* g_layouts = nullptr;

// Whether the driver names `f`, a CUfunction or a CUkernel: a handle it knows.
bool knownFunction(void* f) {
  const Driver& d = Driver::get();
  const char* name = nullptr;
  for (Driver::GetName query : {d.func_name, d.kernel_name}) {
    if (query != nullptr && query(&name, f) == CUDA_SUCCESS && name != nullptr) return true;
  }
  return false;
}

// cuFuncGetParamInfo for a CUfunction; cuKernelGetParamInfo when `f` is a CUkernel handle
// (cuLaunchKernelEx accepts either).
CachedLayout queryLayout(void* f) {
  const Driver& d = Driver::get();
  CachedLayout out;
  for (Driver::ParamInfo query : {d.func_param_info, d.kernel_param_info}) {
    if (query == nullptr) continue;
    out.params.clear();
    for (size_t i = 0; i < 4096; ++i) {
      size_t offset = 0, size = 0;
      if (query(f, i, &offset, &size) != CUDA_SUCCESS) break;
      out.params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    }
    if (!out.params.empty()) {
      out.answer = Layout::kKnown;
      return out;
    }
  }
  // A kernel with no parameters answers "invalid value" at index 0 like an unknown handle does;
  // the driver names a function it knows.
  if (d.func_param_info != nullptr || d.kernel_param_info != nullptr) {
    out.answer = knownFunction(f) ? Layout::kNone : Layout::kUnknown;
  }
  return out;
}

// A module is being unloaded: its functions' handles may come back for other functions.
void forgetLayouts() {
  std::lock_guard lk(g_layout_mu);
  if (g_layouts != nullptr) g_layouts->clear();
}

Layout layoutOf(void* f, std::vector<ParamInfo>& out) {
  {
    std::lock_guard lk(g_layout_mu);
    if (g_layouts == nullptr) g_layouts = new std::unordered_map<void*, CachedLayout>();
    if (auto it = g_layouts->find(f); it != g_layouts->end()) {
      out = it->second.params;
      return it->second.answer;
    }
  }
  CachedLayout answer = queryLayout(f);
  out = answer.params;
  const Layout result = answer.answer;
  std::lock_guard lk(g_layout_mu);
  if (g_layouts->size() < kMaxLayouts) (*g_layouts)[f] = std::move(answer);
  return result;
}

// ---- the launch being made on this thread ----

struct LaunchArgs {
  void* f = nullptr;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  CUstream stream = nullptr;
};

bool launchArgsOf(CUpti_CallbackId cbid, const void* params, LaunchArgs& a);

// The stream a _ptsz entry point means by 0: the calling thread's default stream.
CUstream perThread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

bool launchArgs(CUpti_CallbackId cbid, const void* params, LaunchArgs& a) {
  if (params == nullptr) return false;
  bool ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
              cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz ||
              cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
  bool ok = launchArgsOf(cbid, params, a);
  if (ok && ptsz) a.stream = perThread(a.stream);
  return ok;
}

bool launchArgsOf(CUpti_CallbackId cbid, const void* params, LaunchArgs& a) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
      auto* p = static_cast<const cuLaunchKernel_params*>(params);
      a = {p->f, p->kernelParams, p->extra, p->hStream};
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: {
      auto* p = static_cast<const cuLaunchCooperativeKernel_params*>(params);
      a = {p->f, p->kernelParams, nullptr, p->hStream};
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      auto* p = static_cast<const cuLaunchKernelEx_params*>(params);
      a = {p->f, p->kernelParams, p->extra, p->config ? p->config->hStream : nullptr};
      return true;
    }
    default: return false;
  }
}

struct Pending {
  uint64_t token = 0;     // the deep launch begun on this thread (0: none)
  bool entered = false;   // its driver API was entered (pre digests queued)
  CUstream stream = nullptr;
  std::vector<OperandSpec> after;  // post digests to queue at the driver API's exit
  int64_t host_ns = 0;
};
Pending& deepPending() {
  struct Tag;
  return lastingThreadLocal<Pending, Tag>();
}

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<OperandSpec> targetSpecs(const std::vector<DeepTarget>& targets) {
  std::vector<OperandSpec> specs;
  specs.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    OperandSpec s;
    s.slot = static_cast<int32_t>(i);
    s.name = targets[i].args;
    s.role = db::OperandRole::kInput;
    s.address = targets[i].alloc.base;
    s.bytes = targets[i].alloc.size;
    s.shape = {static_cast<int64_t>(targets[i].alloc.size)};
    specs.push_back(std::move(s));
  }
  return specs;
}

// ---- allocations ----

// Fresh memory holds what was there before, which differs between runs: zero it before the
// program can use it. Stream-ordered allocations (`ordered`) are filled on their `stream`, unless
// it is being captured into a graph (the fill would become part of the program's graph); other
// allocations on the tracer's own stream, waited for before the allocation returns.
void zeroFill(CUdeviceptr base, size_t size, CUstream stream, bool ordered) {
  const Driver& d = Driver::get();
  SelfLaunchScope self;
  RelaxedCaptureScope relaxed;  // the wait must not break another thread's capture
  if (!d.memset_d8_async) return;
  bool ok = false;
  if (ordered) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.is_capturing && d.is_capturing(stream, &status) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE) {
      counters().zero_fill_skipped_capture += 1;
      return;
    }
    ok = d.memset_d8_async(base, 0, size, stream) == CUDA_SUCCESS;
  } else if (CUstream own = ownStream()) {
    ok = d.memset_d8_async(base, 0, size, own) == CUDA_SUCCESS && d.stream_sync(own) == CUDA_SUCCESS;
  }
  if (ok) {
    counters().zero_filled_bytes += static_cast<int64_t>(size);
  } else {
    counters().zero_fill_failed += 1;
  }
}

// Mapped memory (cuMemCreate + cuMemMap, as PyTorch's expandable segments use) becomes usable at
// cuMemSetAccess, which a program may call again on ranges in use (e.g. to give a peer access): so
// only pieces mapped from this process's own fresh handles, not yet filled, are zero-filled, once.
// A handle is fresh until its first mapping: mapped again (an alias, or moved to another address,
// as KV-cache page managers do) its memory holds the program's data, never to be filled.
std::mutex g_mapped_mu;
std::unordered_map<CUmemGenericAllocationHandle, bool>* g_own_handles = nullptr;  // handle -> fresh
std::map<CUdeviceptr, size_t>* g_unfilled = nullptr;                            // base -> size
// Mapped pieces (any handle) not yet given to the allocation map: a piece joins it when access is
// granted to this device, since only then may a digest read it (a mapped piece without access
// faults the program's context when read).
std::map<CUdeviceptr, size_t>* g_unreadable = nullptr;  // base -> size

void ownHandle(CUmemGenericAllocationHandle h, bool created) {
  std::lock_guard lk(g_mapped_mu);
  if (g_own_handles == nullptr) g_own_handles = new std::unordered_map<CUmemGenericAllocationHandle, bool>();
  if (created) {
    if (g_own_handles->size() < (size_t{1} << 20)) (*g_own_handles)[h] = true;
  } else {
    g_own_handles->erase(h);
  }
}

void mapped(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle h) {
  std::lock_guard lk(g_mapped_mu);
  if (g_unreadable == nullptr) g_unreadable = new std::map<CUdeviceptr, size_t>();
  if (g_unreadable->size() < (size_t{1} << 20)) (*g_unreadable)[ptr] = size;
  if (g_own_handles == nullptr) return;
  auto own = g_own_handles->find(h);
  if (own == g_own_handles->end() || !own->second) return;  // imported, or mapped before
  own->second = false;
  if (g_unfilled == nullptr) g_unfilled = new std::map<CUdeviceptr, size_t>();
  if (g_unfilled->size() < (size_t{1} << 20)) (*g_unfilled)[ptr] = size;
}

void eraseRange(std::map<CUdeviceptr, size_t>* pieces, CUdeviceptr ptr, size_t size) {
  if (pieces == nullptr) return;
  for (auto it = pieces->lower_bound(ptr); it != pieces->end() && it->first < ptr + size;) it = pieces->erase(it);
}

void unmapped(CUdeviceptr ptr, size_t size) {
  std::lock_guard lk(g_mapped_mu);
  eraseRange(g_unfilled, ptr, size);
  eraseRange(g_unreadable, ptr, size);
}

// Whether `desc` gives the current device read-write access.
bool grantsCurrentDevice(const CUmemAccessDesc* desc, size_t count) {
  const Driver& d = Driver::get();
  CUdevice dev = 0;
  if (desc == nullptr || d.ctx_device == nullptr || d.ctx_device(&dev) != CUDA_SUCCESS) return false;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && desc[i].location.id == dev &&
        desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return true;
  }
  return false;
}

// The pieces of `pieces` inside [ptr, ptr+size), taken out of it.
std::vector<std::pair<CUdeviceptr, size_t>> takeInside(std::map<CUdeviceptr, size_t>* pieces, CUdeviceptr ptr,
                                                       size_t size) {
  std::vector<std::pair<CUdeviceptr, size_t>> out;
  if (pieces == nullptr) return out;
  auto it = pieces->lower_bound(ptr);
  while (it != pieces->end() && it->first + it->second <= ptr + size) {
    out.emplace_back(it->first, it->second);
    it = pieces->erase(it);
  }
  return out;
}

// Access was set on [ptr, ptr+size): its pieces become readable (the allocation map takes them),
// and the fresh ones are filled.
void accessible(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!grantsCurrentDevice(desc, count)) return;
  std::vector<std::pair<CUdeviceptr, size_t>> readable, fill;
  {
    std::lock_guard lk(g_mapped_mu);
    readable = takeInside(g_unreadable, ptr, size);
    fill = takeInside(g_unfilled, ptr, size);
  }
  for (const auto& [base, n] : readable) {
    if (allocations().add(base, n, AllocKind::kMapped)) counters().maps_seen += 1;
  }
  for (const auto& [base, n] : fill) zeroFill(base, n, nullptr, false);
}

void added(CUdeviceptr base, size_t size, AllocKind kind) {
  if (!allocations().add(base, size, kind)) return;
  counters().allocations_seen += 1;
}

// An imported allocation (IPC, pool import): its extent from the driver. Never zero-filled: it is
// another process's memory.
void imported(CUdeviceptr ptr) {
  const Driver& d = Driver::get();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (d.address_range == nullptr || d.address_range(&base, &size, ptr) != CUDA_SUCCESS) return;
  if (allocations().add(base, size, AllocKind::kIpc)) counters().imports_seen += 1;
}

template <typename P>
const P& as(const CUpti_CallbackData* cb) {
  return *static_cast<const P*>(cb->functionParams);
}

const CUpti_CallbackId kMemoryCallbacks[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemMap, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess, CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle,
    CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2,
    CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle, CUPTI_DRIVER_TRACE_CBID_cuMemPoolImportPointer,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate, CUPTI_DRIVER_TRACE_CBID_cuMemRelease};
// (The tracer's own memsets, its zero fill's too, are told apart by cupti_adapter.cc's
// kOwnMemoryCallbacks, on in every mode.)

}  // namespace

bool enabled() { return Session::get().policy().deep; }

const CUpti_CallbackId* memoryCallbacks(size_t& count) {
  count = std::size(kMemoryCallbacks);
  return kMemoryCallbacks;
}

bool isMemoryCallback(CUpti_CallbackId cbid) {
  for (CUpti_CallbackId id : kMemoryCallbacks)
    if (id == cbid) return true;
  return false;
}

void onMemoryApi(CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  if (cb->callbackSite != CUPTI_API_EXIT || cb->functionParams == nullptr || selfLaunchFlag()) return;
  // Recording stopped for good (it failed, or the process is finishing): the program runs on as
  // it would untraced, its allocations neither tracked nor zero-filled (nor waited for).
  if (!Session::get().enabled()) return;
  if (cb->functionReturnValue && *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS)
    return;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      auto& p = as<cuMemAlloc_v2_params>(cb);
      added(*p.dptr, p.bytesize, AllocKind::kMalloc);
      zeroFill(*p.dptr, p.bytesize, nullptr, false);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      auto& p = as<cuMemAllocPitch_v2_params>(cb);
      size_t size = *p.pPitch * p.Height;
      added(*p.dptr, size, AllocKind::kMalloc);
      zeroFill(*p.dptr, size, nullptr, false);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      // Tracked, never filled: a fill from the GPU would move every page of it to the device (with
      // an oversubscribed managed arena, an eviction storm and an unbounded stall).
      auto& p = as<cuMemAllocManaged_params>(cb);
      added(*p.dptr, p.bytesize, AllocKind::kManaged);
      counters().zero_fill_skipped_managed += 1;
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      auto& p = as<cuMemAllocAsync_params>(cb);  // the _ptsz struct has the same members
      added(*p.dptr, p.bytesize, AllocKind::kAsync);
      bool ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz;
      zeroFill(*p.dptr, p.bytesize, ptsz ? perThread(p.hStream) : p.hStream, true);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      auto& p = as<cuMemAllocFromPoolAsync_params>(cb);
      added(*p.dptr, p.bytesize, AllocKind::kAsync);
      bool ptsz = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz;
      zeroFill(*p.dptr, p.bytesize, ptsz ? perThread(p.hStream) : p.hStream, true);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate:
      ownHandle(*as<cuMemCreate_params>(cb).handle, true);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
      ownHandle(as<cuMemRelease_params>(cb).handle, false);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
      if (allocations().remove(as<cuMemFree_v2_params>(cb).dptr)) counters().frees_seen += 1;
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
      if (allocations().remove(as<cuMemFreeAsync_params>(cb).dptr)) counters().frees_seen += 1;
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      auto& p = as<cuMemMap_params>(cb);
      mapped(p.ptr, p.size, p.handle);  // not accessible yet: mapped and filled at cuMemSetAccess
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess: {
      auto& p = as<cuMemSetAccess_params>(cb);
      accessible(p.ptr, p.size, p.desc, p.count);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      auto& p = as<cuMemUnmap_params>(cb);
      allocations().removeRange(p.ptr, p.size);
      unmapped(p.ptr, p.size);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle:  // the same members as _v2
    case CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2:
      imported(*as<cuIpcOpenMemHandle_v2_params>(cb).pdptr);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle:
      allocations().remove(as<cuIpcCloseMemHandle_params>(cb).dptr);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemPoolImportPointer:
      imported(*as<cuMemPoolImportPointer_params>(cb).ptr_out);
      return;
    default: return;
  }
}

namespace {

// ---- look-back (kernel:NAME@N-B): launches held until the window opens (look_back.h) ----

// The look-back of the deep window, or nullptr when it has none.
LookBack* lookBack() {
  static LookBack* const lb = [] {
    int64_t before = Session::get().policy().deep_window.before;
    return before > 0 ? new LookBack(before) : nullptr;  // never destroyed: used from exit handlers
  }();
  return lb;
}

void apply(const LookBack::Verdicts& v) {
  Fingerprinter& fp = Fingerprinter::get();
  for (uint64_t token : v.keep) fp.releaseHeld(token);
  for (uint64_t token : v.drop) fp.dropHeld(token);
  counters().speculative_kept += static_cast<int64_t>(v.keep.size());
}

}  // namespace

void noteTicket(const WindowGate::LaunchTicket& ticket) {
  if (ticket.speculative) return;  // (the common case while a look-back window waits: no call)
  LookBack* lb = lookBack();
  if (lb == nullptr) return;
  try {
    apply(lb->issued(ticket));
  } catch (...) {  // (an allocation failed: the held launches wait for the exit, which drops them)
  }
}

void dropLookBack() {
  LookBack* lb = lookBack();
  if (lb == nullptr) return;
  try {
    apply(lb->dropAll());
  } catch (...) {
  }
}

void beginLaunch(uint64_t token, int64_t index, bool speculative) {
  Pending& p = deepPending();
  p = Pending{};
  p.token = token;
  LookBack* lb = lookBack();
  if (!speculative || lb == nullptr) return;
  // Held before its digests are queued (Fingerprinter::hold's rule), decided later or at once.
  Fingerprinter::get().hold(token);
  counters().speculative += 1;
  try {
    apply(lb->began(token, index));
  } catch (...) {
    Fingerprinter::get().dropHeld(token);
  }
}

namespace {

// The layout and parameter bytes of the launch `params` describes, each failure counted.
bool readLaunch(CUpti_CallbackId cbid, const void* params, LaunchArgs& args,
                std::vector<ParamInfo>& layout, std::vector<uint8_t>& bytes) {
  if (!launchArgs(cbid, params, args)) {
    counters().no_layout += 1;
    return false;
  }
  switch (layoutOf(args.f, layout)) {
    case Layout::kKnown:
      break;
    case Layout::kNone:
      counters().no_params += 1;
      return false;
    case Layout::kUnknown:
      counters().no_layout += 1;
      return false;
  }
  LaunchParamBytes packed = launchParamBytes(layout, args.kernel_params, args.extra);
  switch (packed.problem) {
    case ParamsProblem::kNone:
      break;
    case ParamsProblem::kMissing:
      counters().params_missing += 1;
      return false;
    case ParamsProblem::kTooLarge:
      counters().params_too_large += 1;
      return false;
  }
  bytes = std::move(packed.bytes);
  return true;
}

}  // namespace

void driverEnter(CUpti_CallbackId cbid, const void* params, uint64_t token) {
  Pending& p = deepPending();
  if (p.token == 0 || p.token != token || p.entered) return;
  p.entered = true;
  int64_t t0 = steadyNs();
  LaunchArgs args;
  std::vector<ParamInfo> layout;
  std::vector<uint8_t> bytes;
  if (!readLaunch(cbid, params, args, layout, bytes)) return;
  size_t ignored = 0;
  std::vector<OperandSpec> specs = targetSpecs(
      deepTargets(layout, bytes, allocations(), kMaxTargets, kMaxMergedBytes, &ignored));
  Fingerprinter& fp = Fingerprinter::get();
  fp.attachParams(p.token, layoutText(layout), std::move(bytes));
  counters().launches += 1;
  counters().targets += static_cast<int64_t>(specs.size());
  counters().words_ignored += static_cast<int64_t>(ignored);
  if (!specs.empty()) {
    counters().digested_bytes += fp.enqueueDeep(p.token, args.stream, specs);
    for (OperandSpec& s : specs) s.role = db::OperandRole::kOutput;
    p.after = std::move(specs);
    p.stream = args.stream;
  }
  p.host_ns = steadyNs() - t0;
}

void driverExit(bool failed) {
  Pending& p = deepPending();
  if (p.token == 0 || !p.entered) return;
  int64_t t0 = steadyNs();
  if (!failed && !p.after.empty()) {
    counters().digested_bytes += Fingerprinter::get().enqueueDeep(p.token, p.stream, p.after);
  }
  counters().host_ns += p.host_ns + (steadyNs() - t0);
  deepPending() = Pending{};
}

void endLaunch() { deepPending() = Pending{}; }

void resetThread() { deepPending() = Pending{}; }

void onModuleUnload() { forgetLayouts(); }

void writeStats(db::TraceWriter& w) {
  Counters& c = counters();
  w.setStat("deep_launches", c.launches);
  w.setStat("deep_targets", c.targets);
  w.setStat("deep_digested_bytes", c.digested_bytes);
  w.setStat("deep_host_ns", c.host_ns);
  w.setStat("deep_no_param_layout", c.no_layout);
  w.setStat("deep_launches_without_params", c.no_params);
  w.setStat("deep_params_too_large", c.params_too_large);
  w.setStat("deep_params_missing", c.params_missing);
  w.setStat("deep_pointer_words_ignored", c.words_ignored);
  w.setStat("deep_allocations_seen", c.allocations_seen);
  w.setStat("deep_frees_seen", c.frees_seen);
  w.setStat("deep_maps_seen", c.maps_seen);
  w.setStat("deep_imports_seen", c.imports_seen);
  w.setStat("deep_allocations_refused", allocations().refused());
  w.setStat("deep_zero_filled_bytes", c.zero_filled_bytes);
  w.setStat("deep_zero_fill_failed", c.zero_fill_failed);
  w.setStat("deep_zero_fill_skipped_graph_capture", c.zero_fill_skipped_capture);
  w.setStat("deep_zero_fill_skipped_managed", c.zero_fill_skipped_managed);
  if (Session::get().policy().deep_window.before > 0) {
    w.setStat("deep_lookback_speculative", c.speculative);
    w.setStat("deep_lookback_kept", c.speculative_kept);
  }
}

}  // namespace detrace::tracer::deep
