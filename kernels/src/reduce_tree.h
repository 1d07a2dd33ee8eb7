// The pairwise tree of ReduceOrder::kTree, evaluated leaf by leaf like a binary counter: level l
// holds the sum of the last complete block of 2^l leaves. Pushing leaf i merges the levels below
// its lowest zero bit (earlier leaves on the left); finish() adds the remaining levels from the
// smallest up, again earlier on the left. This yields exactly the level-by-level pairing described
// in reduce.h (((l0+l1)+(l2+l3)), an unpaired last node moving up), with O(log N) state, so the GPU
// can stream the leaves. Shared verbatim by the CPU twin and the CUDA kernel.
#pragma once

#if defined(__CUDACC__)
#define DETRACE_TREE_HD __host__ __device__ __forceinline__
#define DETRACE_TREE_UNROLL _Pragma("unroll")
#else
#define DETRACE_TREE_HD inline
#define DETRACE_TREE_UNROLL
#endif

namespace detrace::kernels::detail {

inline constexpr int kTreeLevels = 8;  // enough for kMaxReduceRanks = 128 leaves

// Levels needed for n leaves: bit_width(n) (n < 2^levels).
constexpr int treeLevelsFor(int n) {
  int l = 0;
  while (n >> l) ++l;
  return l;
}

DETRACE_TREE_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// right = left + right. Other accumulator types (the GPU's small float vectors) overload it in
// their own namespace.
DETRACE_TREE_HD void treeAdd(const float& left, float& right) { right = addRn(left, right); }

// Acc is float or a type with a treeAdd overload. Valid for up to 2^kLevels - 1 leaves (the GPU
// instantiates the smallest kLevels that fits, to save registers; results do not depend on it).
template <typename Acc, int kLevels = kTreeLevels>
struct TreeSum {
  Acc level[kLevels] = {};

  // Pushes leaf `i` (0-based, in leaf order) with value x.
  DETRACE_TREE_HD void push(int i, Acc x) {
    int carries = 0;  // trailing one bits of i
    while (carries < kLevels && ((i >> carries) & 1)) ++carries;
DETRACE_TREE_UNROLL
    for (int l = 0; l < kLevels; ++l) {
      if (l < carries) treeAdd(level[l], x);
    }
DETRACE_TREE_UNROLL
    for (int l = 0; l < kLevels; ++l) {
      if (l == carries) level[l] = x;
    }
  }

  // The total once all n leaves were pushed.
  DETRACE_TREE_HD Acc finish(int n) const {
    Acc acc = {};
    bool first = true;
DETRACE_TREE_UNROLL
    for (int l = 0; l < kLevels; ++l) {
      if ((n >> l) & 1) {
        if (first) {
          acc = level[l];
          first = false;
        } else {
          treeAdd(level[l], acc);
        }
      }
    }
    return acc;
  }
};

}  // namespace detrace::kernels::detail
