// A program whose non-blocking communicator's first all-reduce NCCL makes on its own thread
// (tests/tracer/fake_nccl_async.cu stands in for NCCL). argv[1]: the count, argv[2]: a seed. The
// send buffer holds send(i) = ((i * 2654435761 + seed) % 1000) * 0.25 (the test computes the same),
// the receive buffer is poisoned with 0xff bytes first; the all-reduce writes 2 * send.
// argv[3] == "other-context": the communicator is a blocking one, and the all-reduce is called
// with a second context of the device current (made with cuCtxCreate), its stream and buffers
// the primary context's, as when one thread drives several GPUs' communicators in turn.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                           \
  do {                                                                     \
    if (static_cast<int>(call) != 0) {                                     \
      std::fprintf(stderr, "nccl_async_gpu_app: %s failed\n", #call);      \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 2654435761ull + seed) % 1000) * 0.25f;
  float *send = nullptr, *recv = nullptr;
  CK(cudaMalloc(&send, n * sizeof(float)));
  CK(cudaMalloc(&recv, n * sizeof(float)));
  CK(cudaMemcpy(send, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemset(recv, 0xff, n * sizeof(float)));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclUniqueId id;
  CK(ncclGetUniqueId(&id));
  const bool other_context = argc > 3 && std::strcmp(argv[3], "other-context") == 0;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = other_context ? 1 : 0;
  ncclComm_t comm = nullptr;
  CK(ncclCommInitRankConfig(&comm, 1, id, 0, &config));
  CUcontext primary = nullptr, second = nullptr;
  if (other_context) {
    CK(cuCtxGetCurrent(&primary));
    CUdevice dev = 0;
    CK(cuDeviceGet(&dev, 0));
    CK(cuCtxCreate(&second, nullptr, 0, dev));  // and current
  }
  const ncclResult_t first = ncclAllReduce(send, recv, n, ncclFloat32, ncclSum, comm, stream);
  if (other_context) {
    CK(cuCtxSetCurrent(primary));
    CK(cuCtxDestroy(second));
  }
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) CK(ncclCommGetAsyncError(comm, &state));
  CK(state);
  CK(cudaStreamSynchronize(stream));
  std::vector<float> out(n);
  CK(cudaMemcpy(out.data(), recv, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != 2.0f * host[i]) {
      std::fprintf(stderr, "nccl_async_gpu_app: recv[%zu] = %g, not %g\n", i, out[i], 2.0f * host[i]);
      return 1;
    }
  }
  CK(ncclCommDestroy(comm));
  std::printf("nccl_async_gpu_app: the all-reduce returned %d, done\n", static_cast<int>(first));
  return 0;
}
