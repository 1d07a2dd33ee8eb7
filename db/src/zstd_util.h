// zstd compression of captured operand bytes (private to db/).
#pragma once

#include <cstdint>
#include <vector>

#include "detrace/base/status.h"

namespace detrace::db {

Result<std::vector<uint8_t>> zstdCompress(const std::vector<uint8_t>& raw, int level);
// Decompresses a frame that must expand to exactly `expected_size` bytes.
Result<std::vector<uint8_t>> zstdDecompress(const void* data, size_t size, size_t expected_size);

}  // namespace detrace::db
