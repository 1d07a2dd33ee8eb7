// A C ABI over two reductions from kernels/ for Python (ctypes): the planted racy reduction
// (float atomics in arrival order: run-to-run nondeterministic) and the fixed-order one (the same
// sum in rank order: deterministic). examples/torch/tp_emulation.py combines its tensor-parallel
// shards with them on one GPU; examples/torch/tp_nccl.py --allreduce ipc|ipc-racy builds a
// one-shot all-reduce from them over CUDA IPC buffers, one process per rank, and declares it to
// detrace through detrace/annotate.h.
//
// Pointers are device pointers (tensor.data_ptr()); `stream` is a cudaStream_t
// (torch.cuda.current_stream().cuda_stream). The calls only enqueue work on `stream`: they never
// synchronise or allocate, so they can be captured into a CUDA graph (the input pointers travel in
// the kernel's parameters; the racy reduction's zeroing is a memset node). Each returns 0 on
// success, else -1 with the reason in detrace_shim_last_error().
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include "detrace/annotate.h"
#include "detrace/kernels/reduce.h"

namespace {

thread_local std::string g_last_error;

int finish(const detrace::Status& st) {
  if (st.isOk()) return 0;
  g_last_error = st.message();
  return -1;
}

// dtype codes shared with the Python side: 0 fp32, 1 fp16, 2 bf16.
bool toDType(int code, detrace::kernels::DType* out) {
  switch (code) {
    case 0: *out = detrace::kernels::DType::kF32; return true;
    case 1: *out = detrace::kernels::DType::kF16; return true;
    case 2: *out = detrace::kernels::DType::kBF16; return true;
    default: g_last_error = "unknown dtype code " + std::to_string(code); return false;
  }
}

bool checkRanks(int nranks) {
  if (nranks >= 1 && nranks <= detrace::kernels::kMaxReduceRanks) return true;
  g_last_error = "nranks must be in [1, " + std::to_string(detrace::kernels::kMaxReduceRanks) + "]";
  return false;
}

bool cudaOk(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return true;
  g_last_error = std::string(call) + " failed: " + cudaGetErrorString(e);
  return false;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const char* detrace_shim_last_error() {
  return g_last_error.c_str();
}

// out = sum over inputs[0..nranks) element-wise, with atomics in arrival order (PLANTED DEFECT).
__attribute__((visibility("default"))) int detrace_shim_racy_reduce(const uint64_t* inputs,
                                                                   int nranks, uint64_t out,
                                                                   uint64_t count, int dtype,
                                                                   void* stream) {
  detrace::kernels::DType t;
  if (!checkRanks(nranks) || !toDType(dtype, &t)) return -1;
  const void* ptrs[detrace::kernels::kMaxReduceRanks];
  for (int i = 0; i < nranks; ++i) ptrs[i] = reinterpret_cast<const void*>(inputs[i]);
  return finish(detrace::kernels::planted_racyReduce(ptrs, nranks, reinterpret_cast<void*>(out),
                                                     static_cast<size_t>(count), t,
                                                     static_cast<cudaStream_t>(stream)));
}

// out = ((in0 + in1) + in2) + ... element-wise in fp32, rounded once: deterministic.
__attribute__((visibility("default"))) int detrace_shim_fixed_reduce(const uint64_t* inputs,
                                                                    int nranks, uint64_t out,
                                                                    uint64_t count, int dtype,
                                                                    void* stream) {
  detrace::kernels::DType t;
  if (!checkRanks(nranks) || !toDType(dtype, &t)) return -1;
  const void* ptrs[detrace::kernels::kMaxReduceRanks];
  for (int i = 0; i < nranks; ++i) ptrs[i] = reinterpret_cast<const void*>(inputs[i]);
  return finish(detrace::kernels::fixedOrderReduce(
      ptrs, nranks, reinterpret_cast<void*>(out), static_cast<size_t>(count), t,
      detrace::kernels::ReduceOrder::kRankOrder, 0, static_cast<cudaStream_t>(stream)));
}

// ---- A one-shot all-reduce over CUDA IPC buffers (tp_nccl.py --allreduce ipc|ipc-racy) ----------
// Each rank owns a device buffer it shares through a CUDA IPC handle; every rank maps every other
// rank's buffer, copies its partial sum into its own, waits for all ranks (the caller's barrier),
// then sums all ranks' buffers straight out of peer memory into its output.

// A zeroed device buffer of `bytes` and its IPC handle (64 bytes, cudaIpcMemHandle_t).
__attribute__((visibility("default"))) int detrace_shim_ipc_alloc(uint64_t bytes, uint64_t* ptr,
                                                                 unsigned char* handle) {
  void* p = nullptr;
  if (!cudaOk(cudaMalloc(&p, bytes), "cudaMalloc")) return -1;
  cudaIpcMemHandle_t h;
  if (!cudaOk(cudaMemset(p, 0, bytes), "cudaMemset") ||
      !cudaOk(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle")) {
    (void)cudaFree(p);
    return -1;
  }
  static_assert(sizeof h == 64);
  std::memcpy(handle, &h, sizeof h);
  *ptr = reinterpret_cast<uint64_t>(p);
  return 0;
}

// Maps another process's buffer; its pointer is valid on the current device.
__attribute__((visibility("default"))) int detrace_shim_ipc_open(const unsigned char* handle,
                                                                uint64_t* ptr) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof h);
  void* p = nullptr;
  if (!cudaOk(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle")) {
    return -1;
  }
  *ptr = reinterpret_cast<uint64_t>(p);
  return 0;
}

__attribute__((visibility("default"))) int detrace_shim_ipc_close(uint64_t ptr) {
  return cudaOk(cudaIpcCloseMemHandle(reinterpret_cast<void*>(ptr)), "cudaIpcCloseMemHandle") ? 0 : -1;
}

__attribute__((visibility("default"))) int detrace_shim_free(uint64_t ptr) {
  return cudaOk(cudaFree(reinterpret_cast<void*>(ptr)), "cudaFree") ? 0 : -1;
}

// dst <- src, `bytes`, device to device, enqueued on `stream`.
__attribute__((visibility("default"))) int detrace_shim_copy(uint64_t dst, uint64_t src,
                                                            uint64_t bytes, void* stream) {
  return cudaOk(cudaMemcpyAsync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src),
                                bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)),
                "cudaMemcpyAsync")
             ? 0
             : -1;
}

// out = the sum of buffers[0..nranks) (every rank's buffer, this rank's own at `rank`), `count`
// elements: in rank order (deterministic, the same bits on every rank), or with `racy` in
// arrival order (PLANTED DEFECT: atomics, so the rounding changes from run to run when
// nranks > 2). Declared to detrace as an AllReduce of group `comm_id` whose send buffer is this
// rank's own buffer, named "planted_oneshot_allreduce" (racy) or "oneshot_allreduce".
// The caller guarantees every rank's buffer holds its partial before the call (a barrier).
__attribute__((visibility("default"))) int detrace_shim_oneshot_allreduce(
    const uint64_t* buffers, int nranks, int rank, uint64_t out, uint64_t count, int dtype,
    int racy, uint64_t comm_id, void* stream) {
  detrace::kernels::DType t;
  if (!checkRanks(nranks) || !toDType(dtype, &t)) return -1;
  if (rank < 0 || rank >= nranks) {
    g_last_error = "rank must be in [0, nranks)";
    return -1;
  }
  const void* ptrs[detrace::kernels::kMaxReduceRanks];
  for (int i = 0; i < nranks; ++i) ptrs[i] = reinterpret_cast<const void*>(buffers[i]);
  detrace_collective c = DETRACE_COLLECTIVE_INIT;
  c.name = racy ? "planted_oneshot_allreduce" : "oneshot_allreduce";
  c.op = DETRACE_ALLREDUCE;
  c.dtype = dtype;  // the shim's codes are detrace_dtype's
  c.send = ptrs[rank];
  c.recv = reinterpret_cast<void*>(out);
  c.count = count;
  c.comm_id = comm_id;
  c.rank = rank;
  c.nranks = nranks;
  c.stream = stream;
  const uint64_t token = detrace_annotate_begin(&c);
  auto s = static_cast<cudaStream_t>(stream);
  const detrace::Status st =
      racy ? detrace::kernels::planted_racyReduce(ptrs, nranks, reinterpret_cast<void*>(out),
                                                  static_cast<size_t>(count), t, s)
           : detrace::kernels::fixedOrderReduce(ptrs, nranks, reinterpret_cast<void*>(out),
                                                static_cast<size_t>(count), t,
                                                detrace::kernels::ReduceOrder::kRankOrder, 0, s);
  detrace_annotate_end(token);
  return finish(st);
}

}  // extern "C"
