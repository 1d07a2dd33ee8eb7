// CPU implementations of replayed ops: the fixed-order reduction's CPU twin (kernels/reduce.h), an
// fp32 GEMM summed sequentially in K, and the fp64 references. They run on every machine, so CI
// replays committed traces without a GPU.
#if DETRACE_REPLAY_HAVE_KERNELS

#include <span>

#include <fmt/format.h>

#include "detrace/kernels/gemm_reference.h"
#include "detrace/kernels/reduce.h"
#include "replay_internal.h"

namespace detrace::replay::detail {
namespace {

std::vector<const void*> segmentPointers(const CollectiveProblem& p) {
  std::vector<const void*> in;
  const int esize = db::dtypeSize(p.dtype);
  for (const auto& buf : p.inputs) in.push_back(buf.data() + p.offset * esize);
  return in;
}

// D = A·B^T with fp32 products (exact for bf16 and fp16 inputs) and fp32 sums in K order, rounded
// once to the output type: the plain "one thread per output, no split" GEMM. Batch-invariant.
Bytes gemmFp32Sequential(const GemmProblem& p) {
  const auto in = kernelDType(p.in);
  const auto out_type = kernelDType(p.out);
  std::vector<float> a(static_cast<size_t>(p.m * p.k)), b(static_cast<size_t>(p.n * p.k));
  for (size_t i = 0; i < a.size(); ++i) a[i] = kernels::loadAsFloat(p.a.data(), i, in);
  for (size_t i = 0; i < b.size(); ++i) b[i] = kernels::loadAsFloat(p.b.data(), i, in);
  Bytes d(static_cast<size_t>(p.m * p.n * db::dtypeSize(p.out)));
  for (int64_t i = 0; i < p.m; ++i) {
    const float* ai = a.data() + i * p.k;
    for (int64_t j = 0; j < p.n; ++j) {
      const float* bj = b.data() + j * p.k;
      float acc = 0.0f;
      for (int64_t q = 0; q < p.k; ++q) acc = acc + ai[q] * bj[q];
      kernels::storeFromFloat(d.data(), static_cast<size_t>(i * p.n + j), out_type, acc);
    }
  }
  return d;
}

std::span<const uint16_t> words(const Bytes& b) {
  return {reinterpret_cast<const uint16_t*>(b.data()), b.size() / 2};
}

}  // namespace

std::vector<double> referenceOf(const LoadedOp& op) {
  if (op.gemm) {
    const GemmProblem& p = *op.gemm;
    return kernels::referenceGemmF64(p.m, p.n, p.k, kernelDType(p.in), words(p.a), words(p.b));
  }
  const CollectiveProblem& p = *op.collective;
  const int esize = db::dtypeSize(p.dtype);
  std::vector<double> sum(static_cast<size_t>(p.count), 0.0);
  for (const auto& in : p.inputs) {
    const uint8_t* base = in.data() + p.offset * esize;
    for (int64_t i = 0; i < p.count; ++i) sum[static_cast<size_t>(i)] += elementValue(base, i, p.dtype);
  }
  return sum;
}

void addCpuGemmImpls(std::shared_ptr<const GemmProblem> p, std::vector<Impl>& out) {
  Impl fp32{"cpu-fp32", "CPU: fp32 products and sums, sequential in K", false, false, false, "",
            [p]() -> Result<Bytes> { return gemmFp32Sequential(*p); }};
  out.push_back(std::move(fp32));
}

std::vector<Impl> cpuReduceImpls(std::shared_ptr<const CollectiveProblem> p,
                                 const std::vector<OrderSpec>& orders) {
  std::vector<Impl> out;
  for (const OrderSpec& o : orders) {
    Impl impl;
    impl.name = o.label + "/cpu";
    impl.description = fmt::format("CPU twin of the fixed-order reduction, {} order", o.label);
    impl.run = [p, o]() -> Result<Bytes> {
      Bytes result(static_cast<size_t>(p->count * db::dtypeSize(p->dtype)));
      std::vector<const void*> in = segmentPointers(*p);
      DETRACE_RETURN_IF_ERROR(kernels::fixedOrderReduceCpu(
          in.data(), p->nranks, result.data(), static_cast<size_t>(p->count),
          kernelDType(p->dtype), static_cast<kernels::ReduceOrder>(o.order), o.start));
      return result;
    };
    out.push_back(std::move(impl));
  }
  return out;
}

}  // namespace detrace::replay::detail

#endif  // DETRACE_REPLAY_HAVE_KERNELS
