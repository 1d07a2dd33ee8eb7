/* A stand-in CUDA driver that is loaded but was never initialized (no cuInit, no context), for
 * the LD_PRELOAD seam test: every entry point the fingerprinter looks up answers
 * CUDA_ERROR_NOT_INITIALIZED, except that cuStreamIsCapturing reads its stream handle as the real
 * driver does. The H200 machine's driver, loaded into a program that never called cuInit, crashed
 * there on the fake cuBLAS app's made-up stream handles (SIGSEGV at address 0x1234); this one
 * says so and aborts, so that a tracer asking about a stream with no context current fails the
 * test here too. */
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
enum { kNotInitialized = 3 };

CUresult cuCtxGetCurrent(void** ctx) {
  if (ctx) *ctx = NULL;
  return kNotInitialized;
}
CUresult cuCtxSetCurrent(void* ctx) { (void)ctx; return kNotInitialized; }
CUresult cuMemAlloc_v2(void* p, size_t n) { (void)p; (void)n; return kNotInitialized; }
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void* s) {
  (void)p; (void)v; (void)n; (void)s;
  return kNotInitialized;
}
CUresult cuStreamSynchronize(void* s) { (void)s; return kNotInitialized; }
CUresult cuMemHostAlloc(void** p, size_t n, unsigned f) { (void)p; (void)n; (void)f; return kNotInitialized; }
CUresult cuMemHostGetDevicePointer_v2(void* d, void* p, unsigned f) {
  (void)d; (void)p; (void)f;
  return kNotInitialized;
}
CUresult cuEventCreate(void** e, unsigned f) { (void)e; (void)f; return kNotInitialized; }
CUresult cuEventRecord(void* e, void* s) { (void)e; (void)s; return kNotInitialized; }
CUresult cuEventQuery(void* e) { (void)e; return kNotInitialized; }
/* The current context's device: none, unless FAKE_CUDA_CURRENT_DEVICE names one (the NCCL seam
 * test of which device a default-stream call's digests would run on). */
CUresult cuCtxGetDevice(int* dev) {
  const char* v = getenv("FAKE_CUDA_CURRENT_DEVICE");
  if (v == NULL || dev == NULL) return kNotInitialized;
  *dev = atoi(v);
  return 0;
}
CUresult cuStreamIsCapturing(void* stream, int* status) {
  (void)status;
  fprintf(stderr, "fake_cuda_uninit: cuStreamIsCapturing(%p) with no context: the real driver "
                  "reads the handle here\n", stream);
  abort();
}
