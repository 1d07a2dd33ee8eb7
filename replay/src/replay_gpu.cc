// GPU implementations of replayed ops, all through kernels/: cuBLASLt (recorded algorithm,
// heuristic, pinned), detrace's batch-invariant GEMMs, the planted split-K GEMM, the fixed-order
// reduction and the planted racy reduction. Inputs are uploaded once per op (on first use) and
// shared by its implementations; each run poisons the output (0xFF bytes, a NaN in every float
// type), runs, synchronises and downloads, so an unwritten element cannot pass as a result.
// Runs on the current device (device 0 unless the caller chose another).
#if DETRACE_REPLAY_HAVE_KERNELS

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "detrace/base/scoped.h"
#include "detrace/kernels/gemm.h"
#include "detrace/kernels/gemm_cublaslt.h"
#include "detrace/kernels/reduce.h"
#include "replay_internal.h"

namespace detrace::replay::detail {

Status cudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::ok();
  const ErrorCode code = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                             ? ErrorCode::kUnavailable
                             : ErrorCode::kInternal;
  return makeError(code, "{} failed: {} ({})", call, cudaGetErrorName(e), cudaGetErrorString(e));
}

namespace {

void freeDevice(void* p) { (void)cudaFree(p); }
using DeviceBuffer = ScopedResource<void*, freeDevice>;

Result<DeviceBuffer> allocate(size_t bytes) {
  void* p = nullptr;
  DETRACE_REPLAY_CUDA(cudaMalloc(&p, bytes == 0 ? 16 : bytes));
  return DeviceBuffer(p);
}

Result<DeviceBuffer> upload(const Bytes& host) {
  DETRACE_ASSIGN_OR_RETURN(DeviceBuffer d, allocate(host.size()));
  DETRACE_REPLAY_CUDA(cudaMemcpy(d.get(), host.data(), host.size(), cudaMemcpyHostToDevice));
  return d;
}

// Poisons `out`, runs `launch`, waits, downloads `bytes`.
Result<Bytes> runOnce(void* out, size_t bytes, const std::function<Status()>& launch) {
  DETRACE_REPLAY_CUDA(cudaMemset(out, 0xFF, bytes));
  DETRACE_RETURN_IF_ERROR(launch());
  DETRACE_REPLAY_CUDA(cudaGetLastError());
  DETRACE_REPLAY_CUDA(cudaDeviceSynchronize());
  Bytes host(bytes);
  DETRACE_REPLAY_CUDA(cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost));
  return host;
}

// One GEMM's device buffers and cuBLASLt wrapper, made on first use.
struct GpuGemm {
  std::shared_ptr<const GemmProblem> p;
  DeviceBuffer a, b, d;
  std::optional<kernels::CublasLtGemm> lt;
  kernels::GemmArgs args;

  size_t outBytes() const { return static_cast<size_t>(p->m * p->n * db::dtypeSize(p->out)); }

  Status prepare() {
    if (d) return Status::ok();
    DETRACE_ASSIGN_OR_RETURN(a, upload(p->a));
    DETRACE_ASSIGN_OR_RETURN(b, upload(p->b));
    DETRACE_ASSIGN_OR_RETURN(d, allocate(outBytes()));
    args = {p->m, p->n, p->k, kernelDType(p->in), kernelDType(p->out), a.get(), b.get(), d.get()};
    return Status::ok();
  }
  Result<kernels::CublasLtGemm*> cublasLt() {
    if (!lt) {
      DETRACE_ASSIGN_OR_RETURN(kernels::CublasLtGemm g, kernels::CublasLtGemm::create());
      lt.emplace(std::move(g));
    }
    return &*lt;
  }
  Result<Bytes> run(const std::function<Status(const kernels::GemmArgs&)>& launch) {
    DETRACE_RETURN_IF_ERROR(prepare());
    return runOnce(d.get(), outBytes(), [&] { return launch(args); });
  }
};

Impl gpuImpl(std::string name, std::string description, const std::string& unavailable,
             std::function<Result<Bytes>()> run) {
  Impl impl;
  impl.name = std::move(name);
  impl.description = std::move(description);
  impl.gpu = true;
  impl.skipped = unavailable;
  impl.run = std::move(run);
  return impl;
}

// The recorded algorithm as a cuBLASLt configuration, or why there is none.
std::optional<kernels::CublasLtAlgoInfo> recordedAlgo(const db::Gemm& g, std::string& why) {
  if (g.algo_source != 1 && g.algo_source != 2) {
    why = "the recorded call's algorithm is unknown (cuBLAS chose it internally); "
          "cublaslt-heuristic is the closest";
    return std::nullopt;
  }
  if (g.algo_id < 0) {
    why = "no algorithm id was recorded";
    return std::nullopt;
  }
  kernels::CublasLtAlgoInfo info;
  info.algo_id = g.algo_id;
  info.tile_id = static_cast<uint32_t>(std::max(g.tile, 0));
  info.stages_id = static_cast<uint32_t>(std::max(g.stages, 0));
  info.splitk_num = std::max(g.split_k, 1);
  info.reduction_scheme = static_cast<uint32_t>(std::max(g.reduction_scheme, 0));
  info.cta_swizzling = static_cast<uint32_t>(std::max(g.swizzle, 0));
  info.custom_option = static_cast<uint32_t>(std::max(g.custom_option, 0));
  return info;
}

}  // namespace

int gpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string gpuUnavailableReason(bool allow_gpu) {
  if (!allow_gpu) return "--no-gpu";
  return gpuCount() > 0 ? "" : "no GPU";
}

void addGpuGemmImpls(std::shared_ptr<const GemmProblem> p, const std::string& unavailable,
                     std::vector<Impl>& out) {
  auto gpu = std::make_shared<GpuGemm>();
  gpu->p = p;
  std::string why;
  auto algo = recordedAlgo(p->recorded, why);
  Impl recorded = gpuImpl(
      "recorded",
      algo ? fmt::format("cuBLASLt with the recorded algorithm ({})", algo->toString())
           : "cuBLASLt with the recorded algorithm",
      unavailable, [gpu, algo]() -> Result<Bytes> {
        return gpu->run([&](const kernels::GemmArgs& a) -> Status {
          DETRACE_ASSIGN_OR_RETURN(kernels::CublasLtGemm * lt, gpu->cublasLt());
          return lt->gemmWithAlgo(a, *algo, nullptr);
        });
      });
  if (recorded.skipped.empty() && !algo) recorded.skipped = why;
  out.push_back(std::move(recorded));
  out.push_back(gpuImpl("cublaslt-heuristic", "cuBLASLt's own algorithm choice for this shape",
                        unavailable, [gpu]() -> Result<Bytes> {
                          return gpu->run([&](const kernels::GemmArgs& a) -> Status {
                            DETRACE_ASSIGN_OR_RETURN(kernels::CublasLtGemm * lt, gpu->cublasLt());
                            return lt->gemmHeuristic(a, nullptr);
                          });
                        }));
  out.push_back(gpuImpl("cublaslt-pinned", "cuBLASLt, one algorithm for every M (batch-invariant)",
                        unavailable, [gpu]() -> Result<Bytes> {
                          return gpu->run([&](const kernels::GemmArgs& a) -> Status {
                            DETRACE_ASSIGN_OR_RETURN(kernels::CublasLtGemm * lt, gpu->cublasLt());
                            return lt->gemmPinned(a, nullptr);
                          });
                        }));
  for (auto kernel : {kernels::GemmKernel::kWgmma, kernels::GemmKernel::kMmaSync}) {
    const bool wgmma = kernel == kernels::GemmKernel::kWgmma;
    out.push_back(gpuImpl(wgmma ? "wgmma" : "mma-sync",
                          fmt::format("detrace's batch-invariant GEMM, {} kernel",
                                      kernels::gemmKernelName(kernel)),
                          unavailable, [gpu, kernel]() -> Result<Bytes> {
                            return gpu->run([&](const kernels::GemmArgs& a) {
                              return kernels::gemmBatchInvariant(a, nullptr, kernel);
                            });
                          }));
  }
  Impl planted = gpuImpl(
      "planted-splitk", "planted defect: split-K 4 when M <= 64, none above (batch-variant)",
      unavailable, [gpu]() -> Result<Bytes> {
        return gpu->run([&](const kernels::GemmArgs& a) -> Status {
          const size_t bytes = kernels::planted_splitKWorkspaceBytes(a);
          DETRACE_ASSIGN_OR_RETURN(DeviceBuffer ws, allocate(bytes));
          Status s = kernels::planted_splitKGemm(a, ws.get(), bytes, nullptr);
          if (s.isOk()) s = cudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize()");
          return s;
        });
      });
  planted.control = true;
  out.push_back(std::move(planted));
}

namespace {

// One collective's per-rank inputs and output on the device, made on first use.
struct GpuReduce {
  std::shared_ptr<const CollectiveProblem> p;
  std::vector<DeviceBuffer> inputs;
  std::vector<const void*> segments;
  DeviceBuffer out;

  size_t outBytes() const { return static_cast<size_t>(p->count * db::dtypeSize(p->dtype)); }
  Status prepare() {
    if (out) return Status::ok();
    inputs.clear();  // a previous attempt may have failed halfway
    segments.clear();
    for (const auto& in : p->inputs) {
      DETRACE_ASSIGN_OR_RETURN(DeviceBuffer d, upload(in));
      segments.push_back(static_cast<const uint8_t*>(d.get()) + p->offset * db::dtypeSize(p->dtype));
      inputs.push_back(std::move(d));
    }
    DETRACE_ASSIGN_OR_RETURN(out, allocate(outBytes()));
    return Status::ok();
  }
  Result<Bytes> run(const std::function<Status()>& launch) {
    DETRACE_RETURN_IF_ERROR(prepare());
    return runOnce(out.get(), outBytes(), launch);
  }
};

}  // namespace

std::vector<Impl> gpuReduceImpls(std::shared_ptr<const CollectiveProblem> p,
                                 const std::vector<OrderSpec>& orders,
                                 const std::string& unavailable) {
  auto gpu = std::make_shared<GpuReduce>();
  gpu->p = p;
  std::vector<Impl> impls;
  for (const OrderSpec& o : orders) {
    impls.push_back(gpuImpl(
        o.label + "/gpu", fmt::format("fixed-order reduction kernel, {} order", o.label),
        unavailable, [gpu, o]() -> Result<Bytes> {
          return gpu->run([&] {
            return kernels::fixedOrderReduce(gpu->segments.data(), gpu->p->nranks, gpu->out.get(),
                                             static_cast<size_t>(gpu->p->count),
                                             kernelDType(gpu->p->dtype),
                                             static_cast<kernels::ReduceOrder>(o.order), o.start,
                                             nullptr);
          });
        }));
  }
  Impl racy = gpuImpl(
      "planted-racy", "planted defect: atomics in arrival order (nondeterministic)", unavailable,
      [gpu]() -> Result<Bytes> {
        return gpu->run([&] {
          return kernels::planted_racyReduce(gpu->segments.data(), gpu->p->nranks, gpu->out.get(),
                                             static_cast<size_t>(gpu->p->count),
                                             kernelDType(gpu->p->dtype), nullptr);
        });
      });
  racy.control = true;
  impls.push_back(std::move(racy));
  return impls;
}

}  // namespace detrace::replay::detail

#endif  // DETRACE_REPLAY_HAVE_KERNELS
