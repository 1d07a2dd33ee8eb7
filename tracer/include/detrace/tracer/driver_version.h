// The NVIDIA driver's version as /proc/driver/nvidia/version gives it.
//
// Where this reads nothing, the tracer asks NVML instead (tracer/src/nvml_query.h), which loads
// NVML (and with it the CUDA driver, its threads and descriptors) into the traced process and can
// take seconds: every kernel module's text must be read here.
#pragma once

#include <string>
#include <string_view>

namespace detrace::tracer {

// "580.159.04", or "" if `text` names none. Both kernel modules' first lines are understood:
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ..." and the open module's
// "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  ...": the version is the
// first word after "Module" made of digits and dots (at least one dot, none at either end).
std::string driverVersionFromProc(std::string_view text);

}  // namespace detrace::tracer
