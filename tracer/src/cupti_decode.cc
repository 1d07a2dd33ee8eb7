// Reading CUPTI's callback parameters and activity records (cupti_decode.h).
#include "detrace/tracer/cupti_decode.h"

#include "detrace/tracer/correlation_ids.h"

#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "detrace/db/writer.h"
#include "detrace/tracer/name_cache.h"
#include "self_launch.h"

namespace detrace::tracer {
namespace {

constexpr size_t kMaxNameCache = 1 << 16;
std::mutex g_name_cache_mu;

// The name cache of the current writer (a new writer, after fork, has its own string ids). Old
// caches are leaked: there is one per writer the process ever had.
NameCache& nameCacheFor(db::TraceWriter* w) {
  static std::atomic<db::TraceWriter*> owner{nullptr};
  static std::atomic<NameCache*> cache{nullptr};
  if (owner.load(std::memory_order_acquire) != w) {
    std::lock_guard lk(g_name_cache_mu);
    if (owner.load(std::memory_order_relaxed) != w) {
      cache.store(new NameCache(kMaxNameCache), std::memory_order_relaxed);
      owner.store(w, std::memory_order_release);
    }
  }
  return *cache.load(std::memory_order_acquire);
}

// The stream of an activity record: CUPTI's stream id (the API's CUstream is on the slot).
int64_t activityStream(db::TraceWriter& w, uint32_t stream_id, uint32_t device) {
  return w.stream(static_cast<int64_t>(stream_id), static_cast<int32_t>(device));
}

}  // namespace

bool classifyLaunch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, LaunchKind& k) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
        k.api = db::LaunchApi::kRuntime; return true;
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
        k.api = db::LaunchApi::kDriverEx; return true;
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
        k.api = db::LaunchApi::kCooperative; return true;
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
        k.api = db::LaunchApi::kGraph; k.graph = true; return true;
      default: return false;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
        k.api = db::LaunchApi::kDriver; return true;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
        k.api = db::LaunchApi::kDriverEx; return true;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
        k.api = db::LaunchApi::kCooperative; return true;
      case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
      case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
        k.api = db::LaunchApi::kGraph; k.graph = true; return true;
      default: return false;
    }
  }
  return false;
}

namespace {

int64_t streamOf(const void* stream) { return reinterpret_cast<int64_t>(stream); }

// A kernel launch's parameters (runtime: stream and func; driver: hStream and f) ...
template <typename P>
LaunchTarget runtimeKernel(const void* params) {
  auto* p = static_cast<const P*>(params);
  return {streamOf(p->stream), 0, p->func};
}
template <typename P>
LaunchTarget driverKernel(const void* params) {
  auto* p = static_cast<const P*>(params);
  return {streamOf(p->hStream), 0, p->f};
}
// ... and the Ex forms', whose stream is in a launch config that may be missing.
template <typename P>
LaunchTarget withConfig(const void* params) {
  auto* p = static_cast<const P*>(params);
  if constexpr (requires { p->func; }) {
    return {p->config != nullptr ? streamOf(p->config->stream) : 0, 0, p->func};
  } else {
    return {p->config != nullptr ? streamOf(p->config->hStream) : 0, 0, p->f};
  }
}

}  // namespace

LaunchTarget launchTarget(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params) {
  if (params == nullptr) return {};
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
        return runtimeKernel<cudaLaunchKernel_v7000_params>(params);
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
        return runtimeKernel<cudaLaunchCooperativeKernel_v9000_params>(params);
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
        return withConfig<cudaLaunchKernelExC_v11060_params>(params);
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000: {
        auto* p = static_cast<const cudaGraphLaunch_v10000_params*>(params);
        return {streamOf(p->stream), reinterpret_cast<uint64_t>(p->graphExec), nullptr};
      }
      default: return {};
    }
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return {};
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      return driverKernel<cuLaunchKernel_params>(params);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return driverKernel<cuLaunchCooperativeKernel_params>(params);
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      return withConfig<cuLaunchKernelEx_params>(params);
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz: {
      auto* p = static_cast<const cuGraphLaunch_params*>(params);
      return {streamOf(p->hStream), reinterpret_cast<uint64_t>(p->hGraph), nullptr};
    }
    default: return {};
  }
}

// The stream a graph launch's `stream` argument means (cupti_decode.h).
CUstream launchStream(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, int64_t stream) {
  const bool ptsz = domain == CUPTI_CB_DOMAIN_RUNTIME_API
                        ? cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000
                        : cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  if (stream == 0 && ptsz) return CU_STREAM_PER_THREAD;
  return reinterpret_cast<CUstream>(stream);
}

int64_t kernelName(db::TraceWriter& w, const char* mangled, const void* handle) {
  if (mangled == nullptr) return w.intern("<unnamed kernel>");
  return nameCacheFor(&w).lookupByHandle(handle, mangled, [&w](const char* m) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(m, nullptr, nullptr, &status);
    int64_t id = w.intern(status == 0 && demangled ? demangled : m);
    std::free(demangled);
    return id;
  });
}

const char* memcpyName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    default: return "memcpy";
  }
}

bool decodeActivity(db::TraceWriter& w, const CUpti_Activity* rec, Activity& a) {
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      if (isSelfKernel(k->name)) {
        // A digest captured into a graph: it counts towards its launch's records and marks
        // where the captured ops ran (reorder_buffer.h). The tracer's other kernels are dropped.
        if (k->graphId == 0) return false;
        a.own = true;
        a.correlation_id = unwrapCorrelation(k->correlationId);
        a.gpu_start_ns = static_cast<int64_t>(k->start);
        a.gpu_end_ns = static_cast<int64_t>(k->end);
        return true;
      }
      a.correlation_id = unwrapCorrelation(k->correlationId);
      a.kind = db::EventKind::kKernel;
      a.name = kernelName(w, k->name);
      a.stream = activityStream(w, k->streamId, k->deviceId);
      a.device = static_cast<int32_t>(k->deviceId);
      a.context = k->contextId;
      a.gpu_start_ns = static_cast<int64_t>(k->start);
      a.gpu_end_ns = static_cast<int64_t>(k->end);
      if (k->graphId != 0) {
        a.graph_id = k->graphId;
        a.graph_node_id = static_cast<int64_t>(k->graphNodeId);
      }
      a.has_launch = true;
      a.launch.grid = {k->gridX, k->gridY, k->gridZ};
      a.launch.block = {k->blockX, k->blockY, k->blockZ};
      a.launch.smem_static = k->staticSharedMemory;
      a.launch.smem_dynamic = k->dynamicSharedMemory;
      a.launch.registers = k->registersPerThread;
      a.launch.api = k->graphId != 0 ? db::LaunchApi::kGraph
                     : k->launchType == CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE ||
                             k->launchType == CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE
                         ? db::LaunchApi::kCooperative
                         : db::LaunchApi::kUnknown;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      a.correlation_id = unwrapCorrelation(m->correlationId);
      a.kind = db::EventKind::kMemcpy;
      a.name = w.intern(memcpyName(m->copyKind));
      a.stream = activityStream(w, m->streamId, m->deviceId);
      a.device = static_cast<int32_t>(m->deviceId);
      a.context = m->contextId;
      a.gpu_start_ns = static_cast<int64_t>(m->start);
      a.gpu_end_ns = static_cast<int64_t>(m->end);
      if (m->graphId != 0) {
        a.graph_id = m->graphId;
        a.graph_node_id = static_cast<int64_t>(m->graphNodeId);
      }
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      a.correlation_id = unwrapCorrelation(m->correlationId);
      a.kind = db::EventKind::kMemset;
      a.name = w.intern("memset");
      a.stream = activityStream(w, m->streamId, m->deviceId);
      a.device = static_cast<int32_t>(m->deviceId);
      a.context = m->contextId;
      a.gpu_start_ns = static_cast<int64_t>(m->start);
      a.gpu_end_ns = static_cast<int64_t>(m->end);
      if (m->graphId != 0) {
        a.graph_id = m->graphId;
        a.graph_node_id = static_cast<int64_t>(m->graphNodeId);
      }
      return true;
    }
    default: return false;
  }
}

}  // namespace detrace::tracer
