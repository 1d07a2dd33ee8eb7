// A stand-in libnccl for the GPU test of calls NCCL makes on its own thread (gpu_record_test.cc,
// `InProgressCollectivesAreFingerprintedAfterNcclMakesThem`): one rank, float sums only. Like
// NCCL with a non-blocking communicator whose first collective connects peers, its first
// all-reduce answers ncclInProgress at once and enqueues the kernel later, from a thread of its
// own; ncclCommGetAsyncError says when it has. The kernel writes 2 * send (as two ranks holding
// the same data would sum), so an output fingerprint taken before it would see other bytes. A
// blocking communicator's all-reduce is made at once, in the stream's context whichever is current.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

struct ncclComm {
  int rank = 0;
  int nranks = 1;
  bool blocking = true;
  bool connected = false;
  std::thread worker;
  std::atomic<bool> made{false};  // the worker's kernel is on its stream
  cudaError_t error = cudaSuccess;
};

namespace {

__global__ void twice(const float* send, float* recv, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    recv[i] = 2.0f * send[i];
  }
}

// As NCCL does, in the communicator's context (here: the stream's) whichever is current.
cudaError_t launch(const void* send, void* recv, size_t count, cudaStream_t stream) {
  CUcontext caller = nullptr, own = nullptr;
  if (cuCtxGetCurrent(&caller) != CUDA_SUCCESS || cuStreamGetCtx(stream, &own) != CUDA_SUCCESS ||
      cuCtxSetCurrent(own) != CUDA_SUCCESS) {
    return cudaErrorInvalidResourceHandle;
  }
  twice<<<64, 256, 0, stream>>>(static_cast<const float*>(send), static_cast<float*>(recv), count);
  const cudaError_t error = cudaGetLastError();
  cuCtxSetCurrent(caller);
  return error;
}

}  // namespace

extern "C" {
ncclResult_t ncclGetVersion(int* version) { *version = 22803; return ncclSuccess; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0x3c, sizeof id->internal);
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t* config) {
  if (nranks != 1 || rank != 0) return ncclInvalidArgument;
  *comm = new ncclComm;
  (*comm)->blocking = config == nullptr || config->blocking != 0;
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dtype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (dtype != ncclFloat32 || op != ncclSum || comm->worker.joinable()) return ncclInvalidUsage;
  if (comm->blocking || comm->connected) return launch(send, recv, count, stream) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
  comm->connected = true;
  comm->made = false;
  int device = 0;
  cudaGetDevice(&device);
  comm->worker = std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // connecting
    cudaSetDevice(device);
    comm->error = launch(send, recv, count, stream);
    comm->made = true;
  });
  return ncclInProgress;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm->worker.joinable() && comm->made) comm->worker.join();
  *state = comm->worker.joinable() ? ncclInProgress : comm->error == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm->worker.joinable()) comm->worker.join();
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t, int* device) { return cudaGetDevice(device) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError; }
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) { *rank = comm->rank; return ncclSuccess; }
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { *count = comm->nranks; return ncclSuccess; }
}
