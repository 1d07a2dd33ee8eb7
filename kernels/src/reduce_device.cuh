// Device helpers of the fixed-order reductions (reduce.cu, peer_reduce.cu): 16-byte raw loads,
// exact conversions to fp32, the batched fixed-order sums and packed stores. The order of the adds
// is fixed here for both kernels, so a peer all-reduce gives fixedOrderReduce's bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "convert.cuh"
#include "reduce_tree.h"

namespace detrace::kernels::detail {

template <int V>
struct FVec {
  float v[V];
};

template <int V>
__device__ __forceinline__ void treeAdd(const FVec<V>& left, FVec<V>& right) {
#pragma unroll
  for (int e = 0; e < V; ++e) right.v[e] = __fadd_rn(left.v[e], right.v[e]);
}


// V elements of T loaded or stored as one access (16 bytes in the vector path).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The raw 16-, 4- or 2-byte word holding V elements of T, loaded through the read-only path.
template <typename T, int V>
using RawOf = std::conditional_t<sizeof(T) * V == 16, uint4,
                                 std::conditional_t<sizeof(T) * V == 4, unsigned int, unsigned short>>;

template <typename T, int V>
__device__ __forceinline__ RawOf<T, V> loadRaw(const void* base, uint64_t elem) {
  return __ldg(reinterpret_cast<const RawOf<T, V>*>(static_cast<const T*>(base) + elem));
}

// Exact conversions of raw words to floats (bf16: the high half of an fp32; fp16: cvt).
__device__ __forceinline__ void wordToFloats(unsigned int w, float* x, __nv_bfloat16) {
  x[0] = __uint_as_float(w << 16);
  x[1] = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void wordToFloats(unsigned int w, float* x, __half) {
  x[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  x[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}
__device__ __forceinline__ void wordToFloats(unsigned int w, float* x, float) {
  x[0] = __uint_as_float(w);
}

template <typename T, int V>
__device__ __forceinline__ void rawToFloats(const RawOf<T, V>& r, float (&x)[V]) {
  if constexpr (sizeof(T) * V == 16) {
    constexpr int kPerWord = 4 / sizeof(T);
    wordToFloats(r.x, x + 0 * kPerWord, T{});
    wordToFloats(r.y, x + 1 * kPerWord, T{});
    wordToFloats(r.z, x + 2 * kPerWord, T{});
    wordToFloats(r.w, x + 3 * kPerWord, T{});
  } else if constexpr (sizeof(T) == 4) {
    wordToFloats(r, x, T{});
  } else {
    float two[2];
    wordToFloats(static_cast<unsigned int>(r), two, T{});
    x[0] = two[0];
  }
}

// Reduces kVecs independent vectors (element offsets elem[u], valid[u]) at once: all loads of a
// batch of ranks for all kVecs vectors are issued before any add, so a thread keeps
// kBatch * kVecs = 8 loads in flight whatever N is (few ranks: more vectors per thread).
// kTreeLevels: 0 for the sequential orders, else the tree depth instantiated.
template <typename T, int V, int kTreeLevels, int kVecs>
__device__ __forceinline__ void reduceGroup(const void* const* src, int nranks,
                                            const uint64_t (&elem)[kVecs],
                                            const bool (&valid)[kVecs], FVec<V> (&acc)[kVecs]) {
  constexpr bool kTree = kTreeLevels > 0;
  constexpr int kBatch = 8 / kVecs;
  detail::TreeSum<FVec<V>, kTree ? kTreeLevels : 1> tree[kVecs];
  for (int k0 = 0; k0 < nranks; k0 += kBatch) {
    RawOf<T, V> raw[kBatch][kVecs];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        raw[b][u] = RawOf<T, V>{};
        if (k0 + b < nranks && valid[u]) raw[b][u] = loadRaw<T, V>(src[k0 + b], elem[u]);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int k = k0 + b;
      if (k >= nranks) break;
#pragma unroll
      for (int u = 0; u < kVecs; ++u) {
        FVec<V> x;
        rawToFloats<T, V>(raw[b][u], x.v);
        if constexpr (kTree) {
          tree[u].push(k, x);
        } else if (k == 0) {
          acc[u] = x;
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) acc[u].v[e] = __fadd_rn(acc[u].v[e], x.v[e]);
        }
      }
    }
  }
  if constexpr (kTree) {
#pragma unroll
    for (int u = 0; u < kVecs; ++u) acc[u] = tree[u].finish(nranks);
  }
}

// The same reduction for a rank count known at compile time (kN): every load of the kN ranks x
// kVecs vectors is issued up front, and the tree's shape is resolved by the compiler (no
// run-time level selects), so the thread holds only raw words and the running sums.
template <typename T, int V, int kN, bool kTree, int kVecs>
__device__ __forceinline__ void reduceGroupN(const void* const* src, const uint64_t (&elem)[kVecs],
                                             const bool (&valid)[kVecs], FVec<V> (&acc)[kVecs]) {
  RawOf<T, V> raw[kN][kVecs];
#pragma unroll
  for (int k = 0; k < kN; ++k) {
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      raw[k][u] = RawOf<T, V>{};
      if (valid[u]) raw[k][u] = loadRaw<T, V>(src[k], elem[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    if constexpr (kTree) {
      detail::TreeSum<FVec<V>, detail::treeLevelsFor(kN)> tree;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        FVec<V> x;
        rawToFloats<T, V>(raw[k][u], x.v);
        tree.push(k, x);
      }
      acc[u] = tree.finish(kN);
    } else {
      rawToFloats<T, V>(raw[0][u], acc[u].v);
#pragma unroll
      for (int k = 1; k < kN; ++k) {
        FVec<V> x;
        rawToFloats<T, V>(raw[k][u], x.v);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[u].v[e] = __fadd_rn(acc[u].v[e], x.v[e]);
      }
    }
  }
}

// A thread's kVecs vectors v0, v0 + stride, ... below `end`: their first elements (V per vector)
// and whether each exists.
template <int V, int kVecs>
__device__ __forceinline__ void vectorGroup(uint64_t v0, uint64_t stride, uint64_t end,
                                            uint64_t (&elem)[kVecs], bool (&valid)[kVecs]) {
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    const uint64_t v = v0 + u * stride;
    valid[u] = v < end;
    elem[u] = valid[u] ? v * V : 0;
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T, int V>
__device__ __forceinline__ void storePack(void* base, uint64_t elem, const FVec<V>& acc) {
  Pack<T, V> out;
#pragma unroll
  for (int e = 0; e < V; ++e) out.v[e] = fromFloat<T>(acc.v[e]);
  *reinterpret_cast<Pack<T, V>*>(static_cast<T*>(base) + elem) = out;
}

}  // namespace detrace::kernels::detail
