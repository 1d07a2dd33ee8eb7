// Test kernels (gpu_late_writer.cu) for digests launched to overlap the kernel before them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace detrace::testing {

// A kernel that lets programmatic dependents start at once (griddepcontrol.launch_dependents),
// spins for `spin_cycles` clock cycles, then copies n bytes from src to dst and stores `value` to
// *flag (device memory).
cudaError_t launchLateWriter(const void* src, void* dst, size_t n, uint64_t* flag, uint64_t value,
                             long long spin_cycles, cudaStream_t stream);

// A copy of n bytes launched with programmatic stream serialization that does not wait for the
// kernel before it: what it reads shows whether it ran before that kernel's writes.
cudaError_t launchSnapshotOverlapped(const void* src, void* dst, size_t n, cudaStream_t stream);

// *dst = *src in one thread, launched the ordinary way.
cudaError_t launchCopyWord(const uint64_t* src, uint64_t* dst, cudaStream_t stream);

}  // namespace detrace::testing
