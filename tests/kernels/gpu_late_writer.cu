// Kernels for DigestGpuTest.OverlappedDigestsWaitForTheKernelBeforeThem (gpu_digest_test.cc): a
// kernel that lets its dependents start at once and writes its output late, and two readers.
#include "gpu_late_writer.h"

namespace detrace::testing {
namespace {

// Triggers its programmatic dependents first, spins for `spin_cycles`, then copies src to dst and
// stores `value` to *flag.
__global__ void lateWriter(const unsigned char* src, unsigned char* dst, size_t n, uint64_t* flag,
                           uint64_t value, long long spin_cycles) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < spin_cycles) {
  }
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i];
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<volatile uint64_t*>(flag) = value;
}

// Copies n bytes without waiting for any earlier kernel (no griddepcontrol.wait).
__global__ void snapshot(const unsigned char* src, unsigned char* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = reinterpret_cast<const volatile unsigned char*>(src)[i];
  }
}

__global__ void copyWord(const uint64_t* src, uint64_t* dst) {
  *dst = *reinterpret_cast<const volatile uint64_t*>(src);
}

}  // namespace

cudaError_t launchLateWriter(const void* src, void* dst, size_t n, uint64_t* flag, uint64_t value,
                             long long spin_cycles, cudaStream_t stream) {
  lateWriter<<<4, 256, 0, stream>>>(static_cast<const unsigned char*>(src),
                                    static_cast<unsigned char*>(dst), n, flag, value, spin_cycles);
  return cudaGetLastError();
}

cudaError_t launchSnapshotOverlapped(const void* src, void* dst, size_t n, cudaStream_t stream) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(4);
  config.blockDim = dim3(256);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, snapshot, static_cast<const unsigned char*>(src),
                            static_cast<unsigned char*>(dst), n);
}

cudaError_t launchCopyWord(const uint64_t* src, uint64_t* dst, cudaStream_t stream) {
  copyWord<<<1, 1, 0, stream>>>(src, dst);
  return cudaGetLastError();
}

}  // namespace detrace::testing
