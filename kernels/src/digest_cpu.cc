// CPU twin of the GPU digest: the reference definition, written with libxxhash's XXH64.
#include <xxhash.h>

#include <cstring>

#include "detrace/kernels/digest.h"

namespace detrace::kernels {

uint64_t digestFinalCpu(uint64_t sum, uint64_t len) {
  unsigned char bytes[16];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(sum >> (8 * i));
    bytes[8 + i] = static_cast<unsigned char>(len >> (8 * i));
  }
  return XXH64(bytes, sizeof bytes, 0);
}

uint64_t digestCpu(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t sum = 0;
  uint64_t index = 0;
  for (size_t off = 0; off < len; off += kDigestChunkBytes, ++index) {
    const size_t n = len - off < kDigestChunkBytes ? len - off : kDigestChunkBytes;
    sum += XXH64(p + off, n, index);
  }
  return digestFinalCpu(sum, len);
}

void digestRowsCpu(const void* base, uint32_t rows, uint64_t row_bytes, uint64_t row_stride,
                   uint64_t* out) {
  const auto* p = static_cast<const unsigned char*>(base);
  for (uint32_t r = 0; r < rows; ++r) out[r] = digestCpu(p + r * row_stride, row_bytes);
}

uint64_t wholeOfRowsCpu(const uint64_t* row_digests, size_t rows) {
  return XXH64(row_digests, rows * sizeof(uint64_t), rows);
}

}  // namespace detrace::kernels
