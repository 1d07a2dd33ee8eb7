// The driver's version from NVML, asked on a thread of the tracer's own.
//
// Where /proc/driver/nvidia/version and /sys/module/nvidia/version are hidden (some containers
// and VMs), the trace's driver_version comes from NVML, whose nvmlInit can take seconds. No thread
// of the program's waits for it, nor the commit thread: its commits must go on meanwhile, or a
// SIGKILL in those seconds would lose them.
#pragma once

namespace detrace::tracer {

// Starts the one-shot thread (Session::writeMetadataLocked, when /proc and sysfs did not tell); at most once
// per process; never throws. The thread is made with every signal blocked.
void askNvmlForDriverVersion() noexcept;

// At finish, before the file is closed: waits for NVML's answer at most 1 s. Past that the thread
// is left to end by itself (what it writes to a closed writer is dropped).
void waitForNvml() noexcept;

// In a forked child: the parent's thread is gone. If it was inside NVML at the fork, NVML's locks
// may stay held in the child for good, so the child never asks.
void resetNvmlAfterFork() noexcept;

}  // namespace detrace::tracer
