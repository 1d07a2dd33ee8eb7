// A C ABI over two reductions from kernels/ for Python (ctypes): the planted racy reduction
// (float atomics in arrival order: run-to-run nondeterministic) and the fixed-order one (the same
// sum in rank order: deterministic). examples/torch/tp_emulation.py combines its tensor-parallel
// shards with them.
//
// Pointers are device pointers (tensor.data_ptr()); `stream` is a cudaStream_t
// (torch.cuda.current_stream().cuda_stream). The calls only enqueue work on `stream`: they never
// synchronise or allocate, so they can be captured into a CUDA graph (the input pointers travel in
// the kernel's parameters; the racy reduction's zeroing is a memset node). Each returns 0 on
// success, else -1 with the reason in detrace_shim_last_error().
#include <cstddef>
#include <cstdint>
#include <string>

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

}  // extern "C"
