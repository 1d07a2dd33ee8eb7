// Element types of the deterministic kernels, and host conversions that round exactly as the GPU's
// __float2bfloat16_rn / __float2half_rn do (round to nearest, ties to even; NaN -> 0x7FFF), so the
// CPU twins can reproduce the GPU's bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace detrace::kernels {

enum class DType : uint8_t { kF32, kF16, kBF16 };

namespace detail {
// std::bit_cast without C++20 (this header is also read by C++17 CUDA sources).
inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

constexpr size_t dtypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

constexpr const char* dtypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

inline float bf16ToFloat(uint16_t h) { return detail::bitsFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t floatToBf16(float f) {
  const uint32_t u = detail::floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return detail::bitsFloat(detail::floatBits(v) | sign);
  }
  if (exp == 31) return detail::bitsFloat(sign | 0x7f800000u | (mant << 13));
  return detail::bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t floatToHalf(float f) {
  const uint32_t u = detail::floatBits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fff;                         // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {                                     // normal half
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero (2^-25 is a tie, to even)
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// Loads element i of a buffer of type t as float / stores a float rounded to t (host side).
inline float loadAsFloat(const void* p, size_t i, DType t) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return halfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

inline void storeFromFloat(void* p, size_t i, DType t, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = floatToHalf(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = floatToBf16(v); break;
  }
}

// Rounds a float to type t and back (the value a store then a load would give).
inline float roundTo(float v, DType t) {
  switch (t) {
    case DType::kF32: return v;
    case DType::kF16: return halfToFloat(floatToHalf(v));
    case DType::kBF16: return bf16ToFloat(floatToBf16(v));
  }
  return v;
}

}  // namespace detrace::kernels
