// The mma.sync GEMM (sm_80 and newer) and the split-K reduction used by the planted GEMM.
//
// Design. One CTA of 8 warps computes a 128×256 tile of D; warps form a 2 (M) × 4 (N) grid of
// 64×64 warp tiles, each 4 × 8 mma.sync.m16n8k16 accumulators in fp32. K advances in 32-wide tiles
// through a 4-stage cp.async ring (96 KiB of shared memory); fragments come from shared memory by
// ldmatrix.x4. A tile row is 64 bytes = four 16-byte chunks; chunk c of row r is stored at chunk
// c ^ ((r / 2) % 4), so the eight rows one ldmatrix phase reads hit eight distinct bank groups.
//
// Batch invariance. Every output element is the same sequence of mma.sync k16 steps over K tiles
// 0, 1, 2, ... whatever M is: the tile shape never changes, rows past M are zero-filled by
// cp.async's src-size operand and never stored. Rows past N and K past the end are zero-filled the
// same way (0·0 adds an exact +0 to the fp32 sum, so the K tail does not disturb the order either).
// `splits` > 1 (planted GEMM only) cuts K into ranges whose fp32 partials a second kernel sums.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gemm_internal.h"

namespace detrace::kernels::gemm_detail {
namespace {

constexpr int kStages = 4;
constexpr int kThreads = 256;
constexpr int kChunksPerRow = kMmaBK / 8;                 // 16-byte chunks per tile row
constexpr int kATileBytes = kMmaBM * kMmaBK * 2;          // 8 KiB
constexpr int kBTileBytes = kMmaBN * kMmaBK * 2;          // 16 KiB
constexpr int kStageBytes = kATileBytes + kBTileBytes;    // 24 KiB
constexpr int kSmemBytes = kStages * kStageBytes;         // 96 KiB
static_assert(kMmaBM * kChunksPerRow % kThreads == 0 && kMmaBN * kChunksPerRow % kThreads == 0);

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk `chunk` of tile row `row` inside one swizzled tile.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * (kMmaBK * 2) + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// 16-byte global -> shared copy; when !pred nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename TIn>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<TIn, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
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

__device__ __forceinline__ __nv_bfloat16 fromFloat(float x, __nv_bfloat16*) {
  return __float2bfloat16_rn(x);
}
__device__ __forceinline__ __half fromFloat(float x, __half*) { return __float2half_rn(x); }
__device__ __forceinline__ float fromFloat(float x, float*) { return x; }

// Copies K tile `kt` of A (rows m0..m0+127) and B (rows n0..n0+255) into ring stage `stage`.
template <typename TIn>
__device__ __forceinline__ void loadTile(uint32_t stage_base, const TIn* a, const TIn* b, int m,
                                         int n, int k, int m0, int n0, int kt) {
  const int k0 = kt * kMmaBK;
#pragma unroll
  for (int i = 0; i < kMmaBM * kChunksPerRow / kThreads; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int gk = k0 + chunk * 8;
    const bool ok = m0 + row < m && gk < k;
    const TIn* src = ok ? a + static_cast<int64_t>(m0 + row) * k + gk : a;
    cpAsync16(stage_base + swizzled(row, chunk), src, ok);
  }
#pragma unroll
  for (int i = 0; i < kMmaBN * kChunksPerRow / kThreads; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int gk = k0 + chunk * 8;
    const bool ok = n0 + row < n && gk < k;
    const TIn* src = ok ? b + static_cast<int64_t>(n0 + row) * k + gk : b;
    cpAsync16(stage_base + kATileBytes + swizzled(row, chunk), src, ok);
  }
}

// One 32-wide K tile of this warp's 64×64 tile: 2 k16 steps × 4 × 8 mma.sync.
template <typename TIn>
__device__ __forceinline__ void computeTile(uint32_t a_s, uint32_t b_s, int wm, int wn, int lane,
                                            float (&acc)[4][8][4]) {
#pragma unroll
  for (int kk = 0; kk < kMmaBK / 16; ++kk) {
    uint32_t af[4][4];
    uint32_t bfr[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = wm * 64 + i * 16 + (lane % 16);
      ldmatrixX4(a_s + swizzled(row, kk * 2 + lane / 16), af[i]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = wn * 64 + j * 16 + (lane % 8) + (lane / 16) * 8;
      ldmatrixX4(b_s + swizzled(row, kk * 2 + (lane / 8) % 2), bfr[j]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        mma16816<TIn>(acc[i][j], af[i], bfr[j / 2][(j % 2) * 2], bfr[j / 2][(j % 2) * 2 + 1]);
      }
    }
  }
}

template <typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads) mmaGemmKernel(const TIn* __restrict__ a,
                                                          const TIn* __restrict__ b,
                                                          TOut* __restrict__ d, int m, int n,
                                                          int k, int tiles_per_split) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_base = smemAddr(smem);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wm = warp / 4, wn = warp % 4;
  const int m0 = static_cast<int>(blockIdx.y) * kMmaBM;
  const int n0 = static_cast<int>(blockIdx.x) * kMmaBN;
  const int k_tiles = (k + kMmaBK - 1) / kMmaBK;
  const int kt_begin = static_cast<int>(blockIdx.z) * tiles_per_split;
  const int kt_end = min(k_tiles, kt_begin + tiles_per_split);
  const int num_tiles = max(0, kt_end - kt_begin);
  d += static_cast<int64_t>(blockIdx.z) * m * n;

  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) loadTile(smem_base + s * kStageBytes, a, b, m, n, k, m0, n0, kt_begin + s);
    cpAsyncCommit();
  }
  for (int t = 0; t < num_tiles; ++t) {
    cpAsyncWait<kStages - 2>();  // tile t has landed (for this thread's copies) ...
    __syncthreads();             // ... for every thread's, and stage (t-1) % kStages is free
    const int next = t + kStages - 1;
    if (next < num_tiles) {
      loadTile(smem_base + (next % kStages) * kStageBytes, a, b, m, n, k, m0, n0,
               kt_begin + next);
    }
    cpAsyncCommit();
    const uint32_t a_s = smem_base + (t % kStages) * kStageBytes;
    computeTile<TIn>(a_s, a_s + kATileBytes, wm, wn, lane, acc);
  }
  cpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r0 = m0 + wm * 64 + i * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = n0 + wn * 64 + j * 8 + (lane % 4) * 2;
      if (col >= n) continue;  // n % 8 == 0, so col < n implies col + 1 < n
      if (r0 < m) storePair(d + static_cast<int64_t>(r0) * n + col, acc[i][j][0], acc[i][j][1]);
      if (r0 + 8 < m) {
        storePair(d + static_cast<int64_t>(r0 + 8) * n + col, acc[i][j][2], acc[i][j][3]);
      }
    }
  }
#else
  __trap();  // cp.async, ldmatrix and bf16 mma.sync need sm_80; gemm.cc never launches it below
#endif
}

template <typename TOut>
__global__ void splitKReduceKernel(const float* __restrict__ partials, int splits, int64_t count,
                                   TOut* __restrict__ d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float sum = partials[i];
    for (int s = 1; s < splits; ++s) sum += partials[s * count + i];  // fixed order 0, 1, 2, ...
    d[i] = fromFloat(sum, static_cast<TOut*>(nullptr));
  }
}

template <typename TIn, typename TOut>
LaunchError launchTyped(const MmaLaunch& p, cudaStream_t stream) {
  auto* kernel = &mmaGemmKernel<TIn, TOut>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) return {err, "cudaFuncSetAttribute(mmaGemmKernel, MaxDynamicSharedMemorySize)"};
  const int k_tiles = (p.k + kMmaBK - 1) / kMmaBK;
  const int tiles_per_split = (k_tiles + p.splits - 1) / p.splits;
  const dim3 grid((p.n + kMmaBN - 1) / kMmaBN, (p.m + kMmaBM - 1) / kMmaBM, p.splits);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(static_cast<const TIn*>(p.a),
                                                 static_cast<const TIn*>(p.b),
                                                 static_cast<TOut*>(p.d), p.m, p.n, p.k,
                                                 tiles_per_split);
  err = cudaGetLastError();
  if (err != cudaSuccess) return {err, "mmaGemmKernel<<<>>>"};
  return {};
}

template <typename TIn>
LaunchError launchForInput(DType out, const MmaLaunch& p, cudaStream_t stream) {
  // validateGemm allows D of the input type or fp32 only; split partials are always fp32.
  if (p.splits > 1 || out == DType::kF32) return launchTyped<TIn, float>(p, stream);
  return launchTyped<TIn, TIn>(p, stream);
}

}  // namespace

LaunchError launchMmaGemm(DType in, DType out, const MmaLaunch& p, cudaStream_t stream) {
  if (in == DType::kBF16) return launchForInput<__nv_bfloat16>(out, p, stream);
  return launchForInput<__half>(out, p, stream);
}

LaunchError launchSplitKReduce(DType out, const float* partials, int splits, int64_t count,
                               void* d, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const int64_t blocks64 = (count + kBlock - 1) / kBlock;
  const int blocks = static_cast<int>(blocks64 < 65536 ? blocks64 : 65536);
  if (out == DType::kBF16) {
    splitKReduceKernel<<<blocks, kBlock, 0, stream>>>(partials, splits, count,
                                                      static_cast<__nv_bfloat16*>(d));
  } else if (out == DType::kF16) {
    splitKReduceKernel<<<blocks, kBlock, 0, stream>>>(partials, splits, count,
                                                      static_cast<__half*>(d));
  } else {
    splitKReduceKernel<<<blocks, kBlock, 0, stream>>>(partials, splits, count,
                                                      static_cast<float*>(d));
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {err, "splitKReduceKernel<<<>>>"};
  return {};
}

}  // namespace detrace::kernels::gemm_detail
