// Deep window, the launch side: a kernel launch's parameters packed into one buffer, the device
// memory its parameter words point into (the extents the tracer digests before and after the
// launch), and the parameter layout as text for the trace's launch_params table. Plain C++ (no CUDA
// types, so it may be included next to <cuda.h>), CPU-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detrace/tracer/allocation_map.h"

namespace detrace::tracer {

// One kernel parameter's place in the packed buffer, from cuFuncGetParamInfo.
struct ParamInfo {
  uint32_t offset = 0;
  uint32_t size = 0;

  bool operator==(const ParamInfo&) const = default;
};

// Largest packed parameter buffer kept (CUDA 12.1+ allows 32764 bytes of kernel parameters).
inline constexpr size_t kMaxParamBytes = 32768;

// Packs a launch's parameters into one buffer laid out by `layout` (the layout cuLaunchKernel's
// `extra` buffer uses): parameter i's `size` bytes are copied from kernel_params[i] to
// layout[i].offset; gaps are zero. The buffer's size is the largest offset+size. Empty if the
// layout is empty or needs more than kMaxParamBytes, if kernel_params is null, or if a parameter
// with a nonzero size has a null pointer.
std::vector<uint8_t> packParams(const std::vector<ParamInfo>& layout, void* const* kernel_params);

// The bytes of a layout's parameters, laid out by it: the largest offset+size (0 when empty).
uint64_t layoutExtent(const std::vector<ParamInfo>& layout);

// Why a launch's parameter bytes could not be read.
enum class ParamsProblem : uint8_t {
  kNone,
  kMissing,   // no kernelParams and no buffer in `extra`, a null parameter pointer, or a size of 0
  kTooLarge,  // the layout needs more than kMaxParamBytes
};
struct LaunchParamBytes {
  std::vector<uint8_t> bytes;
  ParamsProblem problem = ParamsProblem::kNone;
};
// A launch's parameter bytes by `layout` (not empty), from what the launch API was given:
// `kernel_params` packed (packParams) when not null, else the buffer that `extra` names
// (CU_LAUNCH_PARAM_BUFFER_POINTER and CU_LAUNCH_PARAM_BUFFER_SIZE, the list ending at
// CU_LAUNCH_PARAM_END; at most 64 entries are read). From that buffer no more than the layout's
// extent is copied, whatever size the program states: this runs at the API's entry, before the
// driver has checked that size, and a wrong one must not make the tracer read past the buffer.
// A stated size below the extent copies the stated size only.
LaunchParamBytes launchParamBytes(const std::vector<ParamInfo>& layout, void* const* kernel_params,
                                  void* const* extra);

// A memory extent a launch can reach, and which parameter words point into it.
struct DeepTarget {
  Allocation alloc;
  // The words pointing into it, comma-joined in parameter order: "arg0" (param 0's first word),
  // "arg2+16" (param 2, byte 16 inside it), e.g. "arg0,arg3+8". A name ending in "?" is a word
  // equal to the allocation's first byte, right where the allocation of the pointer word before it
  // ends: perhaps that word's one-past-the-end pointer (a range's end, as thrust and CUB pass),
  // which the kernel never reads through; it is digested all the same, since nothing tells it from
  // a pointer to an allocation made right after the other.
  std::string args;

  bool operator==(const DeepTarget&) const = default;
};

// Looks up, in `map`, every 8-byte word of every parameter of at least 8 bytes, at offsets 0, 8,
// 16, ... inside that parameter (words outside `packed` are skipped; zero words are never looked
// up). One target per distinct allocation, in order of first appearance: extents that overlap
// (contiguous mapped pieces merged around two different words) become one target, their union, so
// that no byte is digested twice. At most `max_targets`: words into further allocations are
// ignored, and counted in `*words_ignored` when given. `max_merged` is passed to
// AllocationMap::find. Takes the map's shared lock once per nonzero word.
std::vector<DeepTarget> deepTargets(const std::vector<ParamInfo>& layout,
                                    const std::vector<uint8_t>& packed, const AllocationMap& map,
                                    size_t max_targets = 64,
                                    uint64_t max_merged = uint64_t{1} << 34,
                                    size_t* words_ignored = nullptr);

// The layout as a JSON array of [offset,size] pairs, "[[0,8],[8,4]]"; "[]" for no parameters.
std::string layoutText(const std::vector<ParamInfo>& layout);
// Parses layoutText()'s format (whitespace allowed between tokens); nullopt on anything else,
// including numbers that do not fit in 32 bits.
std::optional<std::vector<ParamInfo>> parseLayoutText(std::string_view text);

}  // namespace detrace::tracer
