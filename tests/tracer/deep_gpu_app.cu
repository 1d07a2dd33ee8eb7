// A small CUDA program for the deep-window GPU test (gpu_deep_test.cc):
//   1. allocates 4 MiB, fills it with 0xAB, frees it and allocates 4 MiB again, then counts the
//      nonzero bytes of the new allocation (the driver usually hands the same memory back: without
//      deep mode's zero fill the old bytes show through) and prints "nonzero_after_realloc N" and
//      "same_address 0|1" (whether it got the freed block's address back);
//   2. fills A (wide-magnitude floats from --seed), runs axpy_struct, whose only parameter is a
//      struct holding the input and output pointers, B = 3 A + 1;
//   3. racy_bins: every block waits a GPU-clock-dependent moment, then adds its elements of A into
//      4 bins with float atomics, so the bins' rounding changes from run to run;
//   4. consume: D = 2 * bins (reads the diverged bins);
// and writes B's and D's final bytes to OUT_DIR/b.bin and OUT_DIR/d.bin for the test to digest.
//   deep_gpu_app OUT_DIR [--seed S]
// Other modes:
//   deep_gpu_app --async             stream-ordered allocations: allocates 4 MiB with
//                                    cudaMallocAsync, fills it with 0xAB, frees it, allocates again
//                                    (the pool hands the same memory back) and prints
//                                    "nonzero_after_realloc N" as above;
//   deep_gpu_app --ipc-export FILE   allocates 1 MiB, fills it with pattern_bytes, writes its CUDA
//                                    IPC handle to FILE and waits (30 s at most) for FILE.done;
//   deep_gpu_app --ipc-import FILE   opens that handle and runs sum_bytes over the peer's memory;
//   deep_gpu_app --vmm MODE          mapped memory (cuMemCreate, cuMemMap, cuMemSetAccess): one
//                                    piece mapped at A, given access and filled with 0xAB, then
//                                    alias: the same handle mapped again at another address;
//                                    move: A unmapped and the same handle mapped at A again;
//                                    neighbour: another handle mapped right after A, without
//                                    access, and fill_bytes run on A;
//                                    prints "vmm_sync R" (the synchronize's result) and
//                                    "vmm_byte 0xNN" (a byte of A): 0 and 0xab when nothing broke.
//   deep_gpu_app --realloc-after MS  one launch (the tracer starts recording at it), a pause of MS
//                                    milliseconds, then --async's allocations
//                                    ("nonzero_after_realloc N", "same_address 0|1": whether
//                                    the pool handed the freed block back);
//   deep_gpu_app --managed           64 MiB of managed memory, its first 4096 bytes set to 3 by
//                                    the host, summed by sum_bytes: prints "managed_sum N" (12288);
//   deep_gpu_app --counts            no_params (a kernel without parameters), fill_bytes over a
//                                    4096-byte allocation, then fill_bytes launched through
//                                    cuLaunchKernel with 4096 threads a block, which the driver
//                                    refuses: prints "refused_launch R" (R: its CUresult, not 0);
//   deep_gpu_app --lookback MODE     a look-back window's opening launch that is never
//                                    fingerprinted: fill_bytes with v = 1, 2, 3 (launches 0-2),
//                                    then opener (launch 3), then launches 4 and 5;
//                                    capture: opener captured into a graph, the graph launched
//                                    (4), fill_bytes v = 5 (5);
//                                    plain: opener launched, fill_bytes v = 4 and v = 5 (4, 5);
//                                    prints "lookback_byte 0xNN" (the buffer's byte after all).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#define CK(call)                                                                          \
  do {                                                                                    \
    auto e_ = (call);                                                                     \
    if (static_cast<int>(e_) != 0) {                                                      \
      std::fprintf(stderr, "deep_gpu_app: %s failed (%d)\n", #call, static_cast<int>(e_)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

constexpr int kN = 1 << 20;
constexpr int kBins = 4;
constexpr size_t kScratch = size_t{4} << 20;

struct AxpyArgs {
  const float* in;
  float* out;
  int n;
  float k;
};

__device__ uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  return x ^ (x >> 16);
}

__global__ void fill_bytes(uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

__global__ void count_nonzero(const uint8_t* p, size_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) c += p[i] != 0;
  if (c) atomicAdd(count, c);
}

__global__ void fill_wide(float* a, int n, uint32_t seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = mix(uint32_t(i) * 2654435761U ^ seed);
  float mant = float(int(h % 2001) - 1000);
  a[i] = ldexpf(mant, int((h >> 11) % 24) - 12);
}

__global__ void axpy_struct(AxpyArgs args) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < args.n) args.out[i] = args.k * args.in[i] + 1.0f;
}

__device__ uint64_t globalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void racy_bins(const float* a, int n, float* bins) {
  // A different wait per block and per run: the atomics land in a different order every run.
  uint64_t until = globalTimer() + (mix(uint32_t(globalTimer()) ^ blockIdx.x) % 4000);
  while (globalTimer() < until) {
  }
  float local[kBins] = {0, 0, 0, 0};
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) local[i % kBins] += a[i];
  for (int b = 0; b < kBins; ++b) atomicAdd(&bins[b], local[b]);
}

// Byte i of the IPC buffer: the test computes the same.
__global__ void pattern_bytes(uint8_t* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>((i * 131u + 7u) >> 3);
}

__global__ void sum_bytes(const uint8_t* p, size_t n, unsigned long long* out) {
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) c += p[i];
  if (c) atomicAdd(out, c);
}

__global__ void consume(const float* bins, float* d, int n) {
  int i = threadIdx.x;
  if (i < n) d[i] = 2.0f * bins[i];
}

__global__ void opener(uint8_t* p) { p[0] = 0x0e; }

__device__ unsigned g_no_params_calls;
__global__ void no_params() { atomicAdd(&g_no_params_calls, 1u); }

bool writeFile(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

constexpr size_t kIpcBytes = size_t{1} << 20;

// Step 1 with stream-ordered allocations: the pool hands the freed memory back at once (a
// cudaMalloc after a cudaFree may get fresh, zeroed pages: it did on an H100 with driver 580).
// `same`: whether the second allocation got the first one's address (else its zeros say nothing).
int asyncNonzeroAfterRealloc(unsigned long long& nonzero, bool& same) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint8_t* p = nullptr;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&p), kScratch, s));
  fill_bytes<<<256, 256, 0, s>>>(p, kScratch, 0xAB);
  CK(cudaFreeAsync(p, s));
  uint8_t* const first = p;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&p), kScratch, s));
  same = p == first;
  unsigned long long* count = nullptr;
  CK(cudaMallocAsync(reinterpret_cast<void**>(&count), sizeof *count, s));
  CK(cudaMemsetAsync(count, 0, sizeof *count, s));
  count_nonzero<<<256, 256, 0, s>>>(p, kScratch, count);
  CK(cudaMemcpyAsync(&nonzero, count, sizeof nonzero, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaFreeAsync(p, s));
  CK(cudaFreeAsync(count, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamDestroy(s));
  return 0;
}

int asyncMode() {
  unsigned long long nonzero = 0;
  bool same = false;
  if (asyncNonzeroAfterRealloc(nonzero, same) != 0) return 1;
  std::printf("nonzero_after_realloc %llu\nsame_address %d\n", nonzero, same ? 1 : 0);
  return 0;
}

int ipcExport(const std::string& file) {
  uint8_t* p = nullptr;
  CK(cudaMalloc(&p, kIpcBytes));
  pattern_bytes<<<256, 256>>>(p, kIpcBytes);
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, p));
  std::string tmp = file + ".tmp";
  if (!writeFile(tmp, &h, sizeof h) || std::rename(tmp.c_str(), file.c_str()) != 0) return 1;
  for (int i = 0; i < 3000; ++i) {  // the importer must finish before this memory goes away
    if (FILE* f = std::fopen((file + ".done").c_str(), "rb")) {
      std::fclose(f);
      break;
    }
    struct timespec ts {0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  CK(cudaFree(p));
  return 0;
}

int ipcImport(const std::string& file) {
  cudaIpcMemHandle_t h;
  FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr || std::fread(&h, sizeof h, 1, f) != 1) {
    std::fprintf(stderr, "deep_gpu_app: cannot read %s\n", file.c_str());
    return 1;
  }
  std::fclose(f);
  uint8_t* p = nullptr;
  CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), h, cudaIpcMemLazyEnablePeerAccess));
  unsigned long long* sum = nullptr;
  CK(cudaMalloc(&sum, sizeof *sum));
  CK(cudaMemset(sum, 0, sizeof *sum));
  sum_bytes<<<64, 256>>>(p, kIpcBytes, sum);
  unsigned long long total = 0;
  CK(cudaMemcpy(&total, sum, sizeof total, cudaMemcpyDeviceToHost));
  std::printf("ipc_sum %llu\n", total);
  CK(cudaIpcCloseMemHandle(p));
  CK(cudaFree(sum));
  return 0;
}

int vmmMode(const std::string& mode) {
  CK(cudaFree(nullptr));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CK(cudaGetDevice(&prop.location.id));
  size_t g = 0;
  CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle h = 0, other = 0;
  CK(cuMemCreate(&h, g, &prop, 0));
  CK(cuMemCreate(&other, g, &prop, 0));
  CUdeviceptr a = 0, b = 0;
  CK(cuMemAddressReserve(&a, 2 * g, 0, 0, 0));
  CK(cuMemAddressReserve(&b, g, 0, 0, 0));
  CUmemAccessDesc rw{};
  rw.location = prop.location;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemMap(a, g, 0, h, 0));
  CK(cuMemSetAccess(a, g, &rw, 1));
  CK(cuMemsetD8(a, 0xAB, g));
  CK(cuCtxSynchronize());
  if (mode == "alias") {
    CK(cuMemMap(b, g, 0, h, 0));
    CK(cuMemSetAccess(b, g, &rw, 1));
  } else if (mode == "move") {
    CK(cuMemUnmap(a, g));
    CK(cuMemMap(a, g, 0, h, 0));
    CK(cuMemSetAccess(a, g, &rw, 1));
  } else if (mode == "neighbour") {
    CK(cuMemMap(a + g, g, 0, other, 0));  // no access given: reading it faults
    fill_bytes<<<1, 32>>>(reinterpret_cast<uint8_t*>(a), 1, 0xAB);
  } else {
    std::fprintf(stderr, "deep_gpu_app: unknown --vmm mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("vmm_sync %d\n", static_cast<int>(cudaDeviceSynchronize()));
  unsigned char byte = 0;
  CK(cuMemcpyDtoH(&byte, a + 5, 1));
  std::printf("vmm_byte %#x\n", byte);
  return 0;
}

int managedMode() {
  constexpr size_t kManaged = size_t{64} << 20, kSummed = 4096;
  uint8_t* m = nullptr;
  CK(cudaMallocManaged(&m, kManaged));
  std::memset(m, 3, kSummed);
  unsigned long long* sum = nullptr;
  CK(cudaMalloc(&sum, sizeof *sum));
  CK(cudaMemset(sum, 0, sizeof *sum));
  sum_bytes<<<16, 256>>>(m, kSummed, sum);
  unsigned long long total = 0;
  CK(cudaMemcpy(&total, sum, sizeof total, cudaMemcpyDeviceToHost));
  std::printf("managed_sum %llu\n", total);
  CK(cudaFree(sum));
  CK(cudaFree(m));
  return 0;
}

int countsMode() {
  constexpr size_t kBytes = 4096;
  uint8_t* p = nullptr;
  CK(cudaMalloc(&p, kBytes));
  no_params<<<1, 1>>>();
  fill_bytes<<<1, 32>>>(p, kBytes, 9);
  CK(cudaDeviceSynchronize());
  cudaFunction_t f = nullptr;
  CK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(fill_bytes)));
  size_t n = kBytes;
  uint8_t v = 7;
  void* args[] = {&p, &n, &v};
  CUresult refused = cuLaunchKernel(reinterpret_cast<CUfunction>(f), 1, 1, 1, 4096, 1, 1, 0,
                                    nullptr, args, nullptr);
  std::printf("refused_launch %d\n", static_cast<int>(refused));
  CK(cudaDeviceSynchronize());
  CK(cudaFree(p));
  return 0;
}

int lookbackMode(const std::string& mode) {
  constexpr size_t kBytes = 4096;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint8_t* p = nullptr;
  CK(cudaMalloc(&p, kBytes));
  for (uint8_t v = 1; v <= 3; ++v) fill_bytes<<<1, 32, 0, s>>>(p, kBytes, v);
  if (mode == "capture") {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    opener<<<1, 1, 0, s>>>(p);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s));
    fill_bytes<<<1, 32, 0, s>>>(p, kBytes, 5);
    CK(cudaStreamSynchronize(s));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
  } else if (mode == "plain") {
    opener<<<1, 1, 0, s>>>(p);
    fill_bytes<<<1, 32, 0, s>>>(p, kBytes, 4);
    fill_bytes<<<1, 32, 0, s>>>(p, kBytes, 5);
  } else {
    std::fprintf(stderr, "deep_gpu_app: unknown --lookback mode %s\n", mode.c_str());
    return 2;
  }
  CK(cudaGetLastError());
  uint8_t byte = 0;
  CK(cudaMemcpyAsync(&byte, p + 7, 1, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  std::printf("lookback_byte %#x\n", byte);
  CK(cudaFree(p));
  CK(cudaStreamDestroy(s));
  return 0;
}

// Step 1: a fresh 4 MiB allocation after a free of one filled with 0xAB; its nonzero bytes.
int reallocAfterMode(long ms) {
  uint8_t* p = nullptr;
  CK(cudaMalloc(&p, 256));
  fill_bytes<<<1, 32>>>(p, 256, 1);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(p));
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000};
  nanosleep(&ts, nullptr);
  unsigned long long nonzero = 0;
  bool same = false;
  if (asyncNonzeroAfterRealloc(nonzero, same) != 0) return 1;
  std::printf("nonzero_after_realloc %llu\nsame_address %d\n", nonzero, same ? 1 : 0);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--vmm") == 0) return vmmMode(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "--lookback") == 0) return lookbackMode(argv[2]);
  if (argc >= 2 && std::strcmp(argv[1], "--managed") == 0) return managedMode();
  if (argc >= 2 && std::strcmp(argv[1], "--counts") == 0) return countsMode();
  if (argc >= 3 && std::strcmp(argv[1], "--realloc-after") == 0)
    return reallocAfterMode(std::atol(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "--async") == 0) return asyncMode();
  if (argc >= 3 && std::strcmp(argv[1], "--ipc-export") == 0) return ipcExport(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "--ipc-import") == 0) return ipcImport(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr, "usage: deep_gpu_app OUT_DIR [--seed S]\n");
    return 2;
  }
  std::string out_dir = argv[1];
  uint32_t seed = 12345;
  if (argc >= 4 && std::strcmp(argv[2], "--seed") == 0) seed = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 0));

  // 1. Fresh memory after a free.
  uint8_t* scratch = nullptr;
  CK(cudaMalloc(&scratch, kScratch));
  fill_bytes<<<256, 256>>>(scratch, kScratch, 0xAB);
  CK(cudaDeviceSynchronize());
  CK(cudaFree(scratch));
  uint8_t* const first = scratch;
  CK(cudaMalloc(&scratch, kScratch));
  unsigned long long* count = nullptr;
  CK(cudaMalloc(&count, sizeof *count));
  CK(cudaMemset(count, 0, sizeof *count));
  count_nonzero<<<256, 256>>>(scratch, kScratch, count);
  unsigned long long nonzero = 0;
  CK(cudaMemcpy(&nonzero, count, sizeof nonzero, cudaMemcpyDeviceToHost));
  std::printf("nonzero_after_realloc %llu\nsame_address %d\n", nonzero, scratch == first ? 1 : 0);

  // 2-4.
  float *a = nullptr, *b = nullptr, *bins = nullptr, *d = nullptr;
  CK(cudaMalloc(&a, kN * sizeof(float)));
  CK(cudaMalloc(&b, kN * sizeof(float)));
  CK(cudaMalloc(&bins, kBins * sizeof(float)));
  CK(cudaMalloc(&d, kBins * sizeof(float)));
  CK(cudaMemset(bins, 0, kBins * sizeof(float)));
  fill_wide<<<kN / 256, 256>>>(a, kN, seed);
  axpy_struct<<<kN / 256, 256>>>(AxpyArgs{a, b, kN, 3.0f});
  racy_bins<<<1024, 256>>>(a, kN, bins);
  consume<<<1, 32>>>(bins, d, kBins);
  CK(cudaGetLastError());
  std::vector<float> hb(kN), hd(kBins);
  CK(cudaMemcpy(hb.data(), b, kN * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hd.data(), d, kBins * sizeof(float), cudaMemcpyDeviceToHost));
  if (!writeFile(out_dir + "/b.bin", hb.data(), hb.size() * sizeof(float)) ||
      !writeFile(out_dir + "/d.bin", hd.data(), hd.size() * sizeof(float))) {
    std::fprintf(stderr, "deep_gpu_app: cannot write to %s\n", out_dir.c_str());
    return 1;
  }
  std::printf("bins %.9g %.9g %.9g %.9g\n", hd[0] / 2, hd[1] / 2, hd[2] / 2, hd[3] / 2);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(bins));
  CK(cudaFree(d));
  CK(cudaFree(count));
  CK(cudaFree(scratch));
  return 0;
}
