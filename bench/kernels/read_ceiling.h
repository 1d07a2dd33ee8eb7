// bench_kernels' read ceiling (read_ceiling.cu): reads `bytes` (a multiple of 16) at `data` with a
// grid of `blocks` x 256 threads; `sink` needs room for `blocks` words and is never written for a
// buffer filled with a repeated byte.
#pragma once

#include <cuda_runtime_api.h>

cudaError_t launchReadCeiling(const void* data, unsigned long long bytes, unsigned int* sink,
                              int blocks, cudaStream_t stream);
