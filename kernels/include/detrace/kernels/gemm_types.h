// The shape, layout and element types (DType, from dtype.h) shared by every GEMM in detrace (our kernels, the cuBLASLt
// wrapper, the planted defect and the fp64 CPU twin). Plain C++17 so that CUDA sources can include
// it too; the functions that use it live in gemm.h, gemm_cublaslt.h and gemm_reference.h.
//
// Layout ("TN", like a PyTorch Linear):   D[M,N] = A[M,K] · B[N,K]ᵀ
//   A  M×K row-major (K contiguous, leading dimension K)   e.g. activations, one token per row
//   B  N×K row-major (K contiguous, leading dimension K)   e.g. a Linear weight [out, in]
//   D  M×N row-major (N contiguous, leading dimension N)
// Inputs are bf16 or fp16 (A and B alike); accumulation is fp32; D is the input type or fp32.
// Requirements: K % 8 == 0 and N % 8 == 0 (16-byte rows for cp.async / TMA loads), every pointer
// 16-byte aligned, 1 <= N, K < 2^31, 0 <= M <= 65535 * 128 (M == 0 is a no-op).
#pragma once

#include <cstdint>

#include "detrace/kernels/dtype.h"

namespace detrace::kernels {

// One GEMM call. Device pointers; the caller keeps them alive until the stream has run the call.
struct GemmArgs {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  DType in_type = DType::kBF16;   // type of A and B: kBF16 or kF16
  DType out_type = DType::kBF16;  // type of D: in_type or kF32
  const void* a = nullptr;        // M×K row-major
  const void* b = nullptr;        // N×K row-major
  void* d = nullptr;              // M×N row-major
};

}  // namespace detrace::kernels
