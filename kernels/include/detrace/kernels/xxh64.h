// XXH64, written out as __host__ __device__ code so that the GPU digest kernels and the CPU tests
// share one implementation. It is the public algorithm of xxHash 0.8 (primes, round, merge round,
// tail, avalanche); the CPU tests check it against libxxhash's XXH64 on random data, and the CPU
// twin of the digest (digest_cpu.cc) uses libxxhash itself, so a slip here cannot hide.
//
// Building blocks are exposed separately (round64, mergeRound, ...) because the GPU kernel runs
// the four lanes of one 1024-byte chunk on four threads and merges them afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DETRACE_HD __host__ __device__ __forceinline__
#else
#define DETRACE_HD inline
#endif

namespace detrace::kernels::xxh {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

DETRACE_HD uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// One accumulator step over an 8-byte little-endian input word.
DETRACE_HD uint64_t round64(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = rotl64(acc, 31);
  return acc * kPrime1;
}

// Folds one lane accumulator into the converged hash (inputs of 32 bytes or more).
DETRACE_HD uint64_t mergeRound(uint64_t h, uint64_t lane) {
  h ^= round64(0, lane);
  return h * kPrime1 + kPrime4;
}

// The four lane seeds.
DETRACE_HD void initLanes(uint64_t seed, uint64_t v[4]) {
  v[0] = seed + kPrime1 + kPrime2;
  v[1] = seed + kPrime2;
  v[2] = seed;
  v[3] = seed - kPrime1;
}

// Converges the four lanes (only used when the input had at least one full 32-byte stripe).
DETRACE_HD uint64_t convergeLanes(const uint64_t v[4]) {
  uint64_t h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
  h = mergeRound(h, v[0]);
  h = mergeRound(h, v[1]);
  h = mergeRound(h, v[2]);
  return mergeRound(h, v[3]);
}

DETRACE_HD uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

// Little-endian loads from a byte pointer of any alignment (host and device are little-endian).
DETRACE_HD uint64_t load64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
DETRACE_HD uint32_t load32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// Consumes the last (len % 32) bytes and applies the avalanche. `h` already includes the total
// length; `p` points at the first unconsumed byte, `len` is the number of bytes left (< 32).
DETRACE_HD uint64_t finalizeTail(uint64_t h, const unsigned char* p, size_t len) {
  while (len >= 8) {
    h ^= round64(0, load64(p));
    h = rotl64(h, 27) * kPrime1 + kPrime4;
    p += 8;
    len -= 8;
  }
  if (len >= 4) {
    h ^= static_cast<uint64_t>(load32(p)) * kPrime1;
    h = rotl64(h, 23) * kPrime2 + kPrime3;
    p += 4;
    len -= 4;
  }
  while (len > 0) {
    h ^= static_cast<uint64_t>(*p) * kPrime5;
    h = rotl64(h, 11) * kPrime1;
    ++p;
    --len;
  }
  return avalanche(h);
}

// Plain XXH64 of `len` bytes at `data` (any alignment), bit-identical to libxxhash's XXH64.
DETRACE_HD uint64_t xxh64(const void* data, size_t len, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t stripes = len / 32;
  uint64_t h;
  if (stripes > 0) {
    uint64_t v[4];
    initLanes(seed, v);
    for (size_t s = 0; s < stripes; ++s, p += 32) {
      for (int lane = 0; lane < 4; ++lane) v[lane] = round64(v[lane], load64(p + 8 * lane));
    }
    h = convergeLanes(v);
  } else {
    h = seed + kPrime5;
  }
  h += static_cast<uint64_t>(len);
  return finalizeTail(h, p, len % 32);
}

// The final step of the detrace digest: XXH64 (seed 0) of the 16 little-endian bytes {sum, len}.
// Written without a byte buffer so that it costs a handful of registers on the GPU.
DETRACE_HD uint64_t digestFinal(uint64_t sum, uint64_t len) {
  uint64_t h = kPrime5 + 16;
  h ^= round64(0, sum);
  h = rotl64(h, 27) * kPrime1 + kPrime4;
  h ^= round64(0, len);
  h = rotl64(h, 27) * kPrime1 + kPrime4;
  return avalanche(h);
}

}  // namespace detrace::kernels::xxh
