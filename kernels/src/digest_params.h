// Launch parameters of the digest kernel, shared by the host launcher (digest.cc) and the device
// code compiled into the embedded fatbin (kernels/fatbin/digest_kernels.cu). Plain data only.
//
// Work is cut into tiles of kTileChunks chunks; one warp hashes one tile at a time, two lanes per
// chunk. Rows of at most kTileChunks chunks are packed whole into tiles ("packed rows": a warp
// finishes them itself); longer rows span several tiles that meet in a DigestSlot ("split rows").
// The whole-buffer digest is the one-row case.
#pragma once

#include <cstdint>

namespace detrace::kernels::detail {

inline constexpr int kTileChunks = 16;
inline constexpr int kSliceBytes = 512;    // bytes of each chunk per pipeline stage
inline constexpr int kSlicesPerChunk = 8;  // 4096 / 512

struct DigestParams {
  uint64_t base;            // device address of row 0
  uint64_t row_bytes;       // bytes per row (the whole length for a single buffer)
  uint64_t row_stride;      // bytes between row starts
  uint64_t out;             // device address of uint64_t[rows]: the digests
  uint64_t slots;           // device address of DigestSlot[rows] (split rows only)
  uint64_t tiles;           // number of tiles
  uint32_t rows;
  uint32_t chunks_per_row;  // G = ceil(row_bytes / 4096); 0 for empty rows
  uint32_t rows_per_tile;   // packed rows: floor(kTileChunks / G); 0 for split rows
  uint32_t tiles_per_row;   // split rows: ceil(G / kTileChunks); 0 for packed rows
  uint32_t slices_per_tile; // pipeline stages a tile needs (8, or fewer for rows < 4096 bytes)
  uint32_t pad;
};

}  // namespace detrace::kernels::detail
