// The detrace tool version, recorded in every trace's metadata.
#pragma once

namespace detrace {
inline constexpr const char* kToolVersion = "0.1.0";
}  // namespace detrace
