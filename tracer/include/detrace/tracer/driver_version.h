// The NVIDIA driver's version as /proc/driver/nvidia/version gives it, or else the kernel
// module's own entry in sysfs, /sys/module/nvidia/version (containers that hide /proc/driver
// often show /sys).
//
// Where neither reads, the tracer asks NVML instead (tracer/src/nvml_query.h), which loads NVML
// (and with it the CUDA driver, its threads and descriptors) into the traced process and can take
// seconds: every kernel module's text must be read here.
#pragma once

#include <string>
#include <string_view>

namespace detrace::tracer {

// "580.159.04", or "" if `text` names none. Both kernel modules' first lines are understood:
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ..." and the open module's
// "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  ...": the version is the
// first word after "Module" made of digits and dots (at least one dot, none at either end).
std::string driverVersionFromProc(std::string_view text);

// "580.159.04" from sysfs's text (the version and a newline), or "" if it is not one.
std::string driverVersionFromSysfs(std::string_view text);

// A small file's bytes (at most 64 KiB), read with the descriptor close-on-exec: the program may
// fork and exec on another thread meanwhile. "" if it cannot be read.
std::string readSmallFile(const char* path);

// The version from the file at `proc` (/proc's text), else from the one at `sysfs`; "" if neither
// names one (a missing or unreadable file reads as empty).
std::string driverVersionFromFiles(const std::string& proc, const std::string& sysfs);

}  // namespace detrace::tracer
