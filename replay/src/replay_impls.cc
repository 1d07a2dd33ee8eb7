// The registry of replay implementations: which ones an op gets, in report order, and how
// `--impl` selects among them.
#if DETRACE_REPLAY_HAVE_KERNELS

#include <fnmatch.h>

#include <cctype>

#include <algorithm>
#include <set>

#include "detrace/kernels/reduce.h"
#include "replay_internal.h"

namespace detrace::replay::detail {
namespace {

// The sum an order computes, as text with the two sides of every + sorted (IEEE addition is
// commutative, so (a+b) and (b+a) give the same bits): equal texts, equal results.
std::string sumExpression(kernels::ReduceOrder order, int nranks, int start) {
  std::vector<int> leaves(static_cast<size_t>(nranks));
  kernels::reduceLeafOrder(order, nranks, start, leaves.data());
  auto add = [](const std::string& a, const std::string& b) {
    return "(" + std::min(a, b) + "+" + std::max(a, b) + ")";
  };
  std::vector<std::string> terms;
  for (int leaf : leaves) terms.push_back(std::to_string(leaf));
  if (order != kernels::ReduceOrder::kTree) {
    std::string acc = terms[0];
    for (size_t i = 1; i < terms.size(); ++i) acc = add(acc, terms[i]);
    return acc;
  }
  while (terms.size() > 1) {  // pairs of neighbours; an unpaired last one moves up as is
    std::vector<std::string> next;
    for (size_t i = 0; i + 1 < terms.size(); i += 2) next.push_back(add(terms[i], terms[i + 1]));
    if (terms.size() % 2 == 1) next.push_back(terms.back());
    terms = std::move(next);
  }
  return terms[0];
}

Impl fp64Impl(const LoadedOp& op, std::shared_ptr<const std::vector<double>> reference) {
  Impl impl;
  impl.name = "fp64";
  impl.description = "CPU: fp64 reference, rounded to the output type";
  impl.once = true;
  const db::DType dtype = op.header.output.dtype;
  impl.run = [reference, dtype]() -> Result<Bytes> { return roundExact(*reference, dtype); };
  return impl;
}

}  // namespace

std::vector<OrderSpec> distinctOrders(int nranks) {
  using kernels::ReduceOrder;
  std::vector<OrderSpec> candidates = {{static_cast<int>(ReduceOrder::kRankOrder), 0, "rank"},
                                       {static_cast<int>(ReduceOrder::kReversed), 0, "reversed"}};
  for (int s = 1; s < nranks; ++s) {
    candidates.push_back({static_cast<int>(ReduceOrder::kRing), s, "ring" + std::to_string(s)});
  }
  candidates.push_back({static_cast<int>(ReduceOrder::kTree), 0, "tree"});
  std::set<std::string> seen;
  std::vector<OrderSpec> out;
  for (const OrderSpec& o : candidates) {
    if (seen.insert(sumExpression(static_cast<ReduceOrder>(o.order), nranks, o.start)).second) {
      out.push_back(o);
    }
  }
  return out;
}

std::vector<Impl> implsFor(const LoadedOp& op, std::shared_ptr<const std::vector<double>> reference,
                           bool allow_gpu) {
  const std::string unavailable = gpuUnavailableReason(allow_gpu);
  std::vector<Impl> impls;
  if (op.gemm) {
    addGpuGemmImpls(op.gemm, unavailable, impls);
    addCpuGemmImpls(op.gemm, impls);
  } else {
    const auto orders = distinctOrders(op.collective->nranks);
    std::vector<Impl> gpu = gpuReduceImpls(op.collective, orders, unavailable);
    std::vector<Impl> cpu = cpuReduceImpls(op.collective, orders);
    for (size_t i = 0; i < orders.size(); ++i) {
      impls.push_back(std::move(gpu[i]));
      impls.push_back(std::move(cpu[i]));
    }
    impls.push_back(ncclImpl(op.collective, unavailable));
    if (auto det = deterministicAllReduceImpl(op.collective, unavailable)) impls.push_back(std::move(*det));
    impls.push_back(std::move(gpu.back()));  // planted-racy
  }
  impls.push_back(fp64Impl(op, std::move(reference)));
  return impls;
}

bool implSelected(const std::vector<std::string>& tokens, const Impl& impl) {
  if (tokens.empty()) return true;
  for (const std::string& t : tokens) {
    if (t == impl.name || impl.name.starts_with(t + "/")) return true;
    // A family: "ring" selects ring0/gpu, ring1/cpu, ...
    if (!t.empty() && impl.name.size() > t.size() && impl.name.starts_with(t) &&
        std::isdigit(static_cast<unsigned char>(impl.name[t.size()]))) {
      return true;
    }
    if ((t == "gpu" && impl.gpu) || (t == "cpu" && !impl.gpu) || (t == "controls" && impl.control)) {
      return true;
    }
    if (t.find('*') != std::string::npos && fnmatch(t.c_str(), impl.name.c_str(), 0) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace detrace::replay::detail

#endif  // DETRACE_REPLAY_HAVE_KERNELS
