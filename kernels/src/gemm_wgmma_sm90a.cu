// The wgmma + TMA GEMM for Hopper (sm_90a only: wgmma needs the arch-specific target).
//
// Design. One CTA of three warpgroups computes a 128×256 tile of D. Warpgroup 0 is the producer:
// one thread issues TMA loads (cp.async.bulk.tensor.2d) of a 128×64 A tile and a 256×64 B tile per
// K step into a 4-stage ring (4 × 48 KiB) and signals the stage's "full" mbarrier with the byte
// count. Warpgroups 1 and 2 are consumers: each owns 64 rows of the tile and runs four
// wgmma.m64n256k16 per K step (128 fp32 accumulators per thread), keeps one K step of wgmma in
// flight (wait_group 1), and arrives on the stage's "empty" mbarrier once the wgmma that read it
// have retired, which lets the producer refill it. TMA writes each tile with the 128-byte swizzle,
// which is the layout the wgmma shared-memory descriptors below describe (K-major, SBO = 1024 B,
// stage bases 1024-byte aligned); stepping K by 16 inside the 64-wide tile is +32 bytes on the
// descriptor's start address, as in CUTLASS's GMMA descriptor iterator.
//
// Batch invariance. Every CTA walks K tiles 0, 1, 2, ... and every output element gets the same
// wgmma sequence for every M; TMA zero-fills the rows past M or N and the K tail (0·0 adds an exact
// +0), and the epilogue masks rows past M. No split-K, no M-dependent choice anywhere.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gemm_internal.h"

namespace detrace::kernels::gemm_detail {
namespace {

constexpr int kStages = 4;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kConsumerRows = kWgmmaBM / kConsumers;    // 64: one wgmma M
constexpr int kATileBytes = kWgmmaBM * kWgmmaBK * 2;    // 16 KiB
constexpr int kBTileBytes = kWgmmaBN * kWgmmaBK * 2;    // 32 KiB
constexpr int kStageBytes = kATileBytes + kBTileBytes;  // 48 KiB
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;  // + align, mbarriers
static_assert(kWgmmaBK * 2 == 128, "one K tile row must be exactly one 128-byte swizzle row");
static_assert(kConsumerRows == 64 && kWgmmaBN == 256, "the wgmma below is m64n256k16");
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100/H200 SM offers");

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DETRACE_GEMM_SM90A 1
#endif

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#ifdef DETRACE_GEMM_SM90A
__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;\n" : "=l"(t));
  return t;
}

// Spins until the phase with parity `parity` of the mbarrier has completed. Deadlock watchdog: a
// wait that lasts kWatchdogNs (10 s; real waits take microseconds) traps, so a broken pipeline
// fails the launch with an error instead of hanging the caller's stream forever.
constexpr uint64_t kWatchdogNs = 10'000'000'000ull;
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  uint64_t start = 0;
  for (uint32_t spins = 0;; ++spins) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done != 0) return;
    if (spins == 0) start = globalTimerNs();
    if ((spins & 1023u) == 1023u && globalTimerNs() - start > kWatchdogNs) __trap();
  }
}

// 2-D TMA load of the box at (c0 = K coordinate, c1 = row coordinate) into shared memory.
__device__ __forceinline__ void tmaLoad2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                          int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from reading or moving an accumulator across an async wgmma boundary
// (CUTLASS's warpgroup_fence_operand).
__device__ __forceinline__ void fenceOperand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row core-matrix groups 1024 B
// apart (SBO), LBO unused for swizzled K-major layouts (set to 1, as CUTLASS does).
__device__ __forceinline__ uint64_t smemDesc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// Generated by a script: wgmma.mma_async m64n256k16 with fp32 accumulators, scale-d = 1 (accumulate,
// the accumulators start at zero), no negation, no transpose (A and B both K-major, as in CUTLASS's
// SM90 GMMA atoms). The last parameter only selects the input type.
__device__ __forceinline__ void wgmmaM64N256K16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                __nv_bfloat16*) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void wgmmaM64N256K16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                __half*) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void storePair(__nv_bfloat16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void storePair(__half* p, float x, float y) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void storePair(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}

// One thread streams every K tile of this CTA into the ring.
__device__ __forceinline__ void produce(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                        uint32_t base, uint32_t bars, int m0, int n0,
                                        int k_tiles) {
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    const uint32_t full = bars + 8 * s;
    const uint32_t empty = bars + 8 * (kStages + s);
    if (kt >= kStages) mbarWait(empty, static_cast<uint32_t>((kt / kStages - 1) & 1));
    mbarArriveExpectTx(full, kStageBytes);
    const uint32_t a_tile = base + static_cast<uint32_t>(s * kStageBytes);
    tmaLoad2d(a_tile, map_a, full, kt * kWgmmaBK, m0);
    tmaLoad2d(a_tile + kATileBytes, map_b, full, kt * kWgmmaBK, n0);
  }
}

// Consumer warpgroup `c` (0 or 1): rows m0 + 64c .. m0 + 64c + 63 of the tile, all 256 columns.
template <typename TIn>
__device__ __forceinline__ void consume(float (&acc)[128], uint32_t base, uint32_t bars, int c,
                                        int k_tiles) {
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    mbarWait(bars + 8 * s, static_cast<uint32_t>((kt / kStages) & 1));
    const uint32_t a_tile = base + static_cast<uint32_t>(s * kStageBytes + c * kConsumerRows * 128);
    const uint32_t b_tile = base + static_cast<uint32_t>(s * kStageBytes + kATileBytes);
    wgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kWgmmaBK / 16; ++kk) {
      wgmmaM64N256K16(acc, smemDesc(a_tile + 32 * kk), smemDesc(b_tile + 32 * kk),
                      static_cast<TIn*>(nullptr));
    }
    wgmmaCommit();
    wgmmaWait<1>();  // the previous K step's wgmma have retired: release its stage
    if (kt > 0) mbarArrive(bars + 8 * (kStages + (kt - 1) % kStages));
  }
  wgmmaWait<0>();
#pragma unroll
  for (int i = 0; i < 128; ++i) fenceOperand(acc[i]);
}

// Accumulator fragment of wgmma m64nNk16: warp w of the warpgroup owns rows 16w..16w+15; for
// column block j (8 columns) a thread holds (row, col), (row, col+1), (row+8, col), (row+8, col+1)
// with row = lane / 4 and col = 8j + 2 (lane % 4).
template <typename TOut>
__device__ __forceinline__ void storeTile(const float (&acc)[128], TOut* d, int m, int n, int row0,
                                          int n0) {
  const int t = static_cast<int>(threadIdx.x) % 128;
  const int row = row0 + (t / 32) * 16 + (t % 32) / 4;
#pragma unroll
  for (int j = 0; j < kWgmmaBN / 8; ++j) {
    const int col = n0 + j * 8 + (t % 4) * 2;
    if (col >= n) continue;  // n % 8 == 0, so col < n implies col + 1 < n
    if (row < m) storePair(d + static_cast<int64_t>(row) * n + col, acc[4 * j], acc[4 * j + 1]);
    if (row + 8 < m) {
      storePair(d + static_cast<int64_t>(row + 8) * n + col, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}

#endif  // DETRACE_GEMM_SM90A

template <typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads, 1)
    wgmmaGemmKernel(const __grid_constant__ CUtensorMap map_a,
                    const __grid_constant__ CUtensorMap map_b, TOut* __restrict__ d, int m, int n,
                    int k) {
#ifdef DETRACE_GEMM_SM90A
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smemAddr(smem_raw) + 1023u) & ~1023u;  // 128B swizzle wants 1 KiB
  const uint32_t bars = base + kStages * kStageBytes;
  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int m0 = static_cast<int>(blockIdx.y) * kWgmmaBM;
  const int n0 = static_cast<int>(blockIdx.x) * kWgmmaBN;
  const int k_tiles = (k + kWgmmaBK - 1) / kWgmmaBK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarInit(bars + 8 * s, 1);                             // producer's expect_tx
      mbarInit(bars + 8 * (kStages + s), kConsumers * 128);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    if (threadIdx.x == 0) produce(&map_a, &map_b, base, bars, m0, n0, k_tiles);
    return;
  }
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) {
    acc[i] = 0.0f;
    fenceOperand(acc[i]);
  }
  consume<TIn>(acc, base, bars, wg - 1, k_tiles);
  storeTile(acc, d, m, n, m0 + (wg - 1) * kConsumerRows, n0);
#else
  __trap();  // built for sm_90a only (see kernels/CMakeLists.txt); never reached elsewhere
#endif
}

template <typename TIn, typename TOut>
LaunchError launchTyped(const WgmmaLaunch& p, cudaStream_t stream) {
  auto* kernel = &wgmmaGemmKernel<TIn, TOut>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) {
    return {err, "cudaFuncSetAttribute(wgmmaGemmKernel, MaxDynamicSharedMemorySize)"};
  }
  const dim3 grid((p.n + kWgmmaBN - 1) / kWgmmaBN, (p.m + kWgmmaBM - 1) / kWgmmaBM);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p.map_a, p.map_b, static_cast<TOut*>(p.d),
                                                    p.m, p.n, p.k);
  err = cudaGetLastError();
  if (err != cudaSuccess) return {err, "wgmmaGemmKernel<<<>>>"};
  return {};
}

template <typename TIn>
LaunchError launchForInput(DType out, const WgmmaLaunch& p, cudaStream_t stream) {
  // validateGemm allows D of the input type or fp32 only.
  if (out == DType::kF32) return launchTyped<TIn, float>(p, stream);
  return launchTyped<TIn, TIn>(p, stream);
}

}  // namespace

LaunchError launchWgmmaGemm(DType in, DType out, const WgmmaLaunch& p, cudaStream_t stream) {
  if (in == DType::kBF16) return launchForInput<__nv_bfloat16>(out, p, stream);
  return launchForInput<__half>(out, p, stream);
}

}  // namespace detrace::kernels::gemm_detail
