// The 64-bit mixer the synthetic-run tests use to make fingerprints that depend on their inputs
// (a splitmix-style finaliser: different inputs give different values, the same ones the same).
#pragma once

#include <cstdint>

namespace detrace::testing {

inline uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL);
  x ^= x >> 29;
  return x * 0xBF58476D1CE4E5B9ULL;
}

}  // namespace detrace::testing
