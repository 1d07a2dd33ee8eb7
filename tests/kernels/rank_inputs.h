// Inputs for the all-reduce tests: one random host buffer per rank and the CPU twin's
// fixed-order sum of them, the value every rank must end with.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::testing {

struct RankInputs {
  std::vector<std::vector<unsigned char>> inputs;  // by rank: count elements of dtype
  std::vector<unsigned char> sum;                  // fixedOrderReduceCpu(inputs, order, start)
};

// Random finite values (multiples of 1/7 in [-18.3, 18.2], so sums stay in range), fresh per call.
inline RankInputs randomRankInputs(std::mt19937_64& rng, int nranks, size_t count,
                                   kernels::DType dtype, kernels::ReduceOrder order, int start) {
  RankInputs r;
  const size_t bytes = count * kernels::dtypeSize(dtype);
  std::vector<const void*> ptrs;
  for (int q = 0; q < nranks; ++q) {
    auto& in = r.inputs.emplace_back(bytes);
    for (size_t i = 0; i < count; ++i) {
      kernels::storeFromFloat(in.data(), i, dtype, static_cast<float>(static_cast<int>(rng() % 256) - 128) / 7.0f);
    }
  }
  for (const auto& in : r.inputs) ptrs.push_back(in.data());
  r.sum.resize(bytes);
  EXPECT_TRUE(kernels::fixedOrderReduceCpu(ptrs.data(), nranks, r.sum.data(), count, dtype, order, start).isOk());
  return r;
}

}  // namespace detrace::testing
