#include "zstd_util.h"

#include <zstd.h>

namespace detrace::db {

Result<std::vector<uint8_t>> zstdCompress(const std::vector<uint8_t>& raw, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), level);
  if (ZSTD_isError(n)) {
    return makeError(ErrorCode::kInternal, "zstd compression failed: {}", ZSTD_getErrorName(n));
  }
  out.resize(n);
  return out;
}

Result<std::vector<uint8_t>> zstdDecompress(const void* data, size_t size, size_t expected_size) {
  unsigned long long frame = ZSTD_getFrameContentSize(data, size);
  if (frame == ZSTD_CONTENTSIZE_ERROR || frame == ZSTD_CONTENTSIZE_UNKNOWN || frame != expected_size) {
    return makeError(ErrorCode::kCorrupt,
                     "captured bytes are damaged (zstd frame of {} bytes does not hold the {} "
                     "bytes the trace says); re-record the run",
                     size, expected_size);
  }
  std::vector<uint8_t> out(expected_size);
  size_t n = ZSTD_decompress(out.data(), out.size(), data, size);
  if (ZSTD_isError(n) || n != expected_size) {
    return makeError(ErrorCode::kCorrupt, "captured bytes are damaged ({}); re-record the run",
                     ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame");
  }
  return out;
}

}  // namespace detrace::db
