// Export of a run as Chrome-trace JSON, which Perfetto UI (ui.perfetto.dev) and chrome://tracing
// open: one process track per rank, one thread track per CUDA stream, kernels as slices at their
// GPU times, collectives and GEMMs with their arguments, markers as instants.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>

#include "detrace/base/status.h"
#include "detrace/db/run.h"

namespace detrace::replay {

// Called now and then with events written so far and the total.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// Streams the run to `out` (never holds all events in memory).
Status exportPerfetto(const db::Run& run, std::FILE* out, const ProgressFn& progress = {});

}  // namespace detrace::replay
