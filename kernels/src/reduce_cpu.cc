// Leaf orders of the fixed-order reduction, argument checks shared with the GPU launcher, and the
// CPU twin. The twin performs the same fp32 operations in the same order as reduce.cu (this file
// is compiled with -ffp-contract=off, and x86-64 uses SSE arithmetic, never x87).
#include <vector>

#include "detrace/kernels/reduce.h"
#include "reduce_tree.h"

namespace detrace::kernels {

const char* reduceOrderName(ReduceOrder order) {
  switch (order) {
    case ReduceOrder::kRankOrder: return "rank";
    case ReduceOrder::kReversed: return "reversed";
    case ReduceOrder::kRing: return "ring";
    case ReduceOrder::kTree: return "tree";
  }
  return "?";
}

void reduceLeafOrder(ReduceOrder order, int nranks, int start, int* leaves) {
  for (int k = 0; k < nranks; ++k) {
    switch (order) {
      case ReduceOrder::kRankOrder: leaves[k] = k; break;
      case ReduceOrder::kReversed: leaves[k] = nranks - 1 - k; break;
      case ReduceOrder::kRing:
      case ReduceOrder::kTree: leaves[k] = (start + k) % nranks; break;
    }
  }
}

namespace detail {

Status checkReduceArgs(const void* const* inputs, int nranks, const void* out, ReduceOrder order,
                       int start) {
  if (nranks < 1 || nranks > kMaxReduceRanks) {
    return makeError(ErrorCode::kInvalidArgument, "{} ranks: the reduction takes 1 to {}",
                     nranks, kMaxReduceRanks);
  }
  if (start < 0 || start >= nranks) {
    return makeError(ErrorCode::kInvalidArgument, "start rank {} is outside [0, {})", start,
                     nranks);
  }
  if (static_cast<int>(order) > static_cast<int>(ReduceOrder::kTree)) {
    return makeError(ErrorCode::kInvalidArgument, "unknown reduce order {}",
                     static_cast<int>(order));
  }
  if (inputs == nullptr || out == nullptr) {
    return makeError(ErrorCode::kInvalidArgument, "null input array or output");
  }
  for (int k = 0; k < nranks; ++k) {
    if (inputs[k] == nullptr) {
      return makeError(ErrorCode::kInvalidArgument, "input of rank {} is null", k);
    }
  }
  return Status::ok();
}

}  // namespace detail

Status fixedOrderReduceCpu(const void* const* inputs, int nranks, void* out, size_t count,
                           DType dtype, ReduceOrder order, int start) {
  DETRACE_RETURN_IF_ERROR(detail::checkReduceArgs(inputs, nranks, out, order, start));
  int leaves[kMaxReduceRanks];
  reduceLeafOrder(order, nranks, start, leaves);
  for (size_t i = 0; i < count; ++i) {
    float acc = 0.0f;
    if (order == ReduceOrder::kTree) {
      detail::TreeSum<float> tree;
      for (int k = 0; k < nranks; ++k) tree.push(k, loadAsFloat(inputs[leaves[k]], i, dtype));
      acc = tree.finish(nranks);
    } else {
      acc = loadAsFloat(inputs[leaves[0]], i, dtype);
      for (int k = 1; k < nranks; ++k) acc = acc + loadAsFloat(inputs[leaves[k]], i, dtype);
    }
    storeFromFloat(out, i, dtype, acc);
  }
  return Status::ok();
}

}  // namespace detrace::kernels
