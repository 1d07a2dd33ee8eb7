// Placement by correlation id (reorder_buffer.h): when a capture runs without launch callbacks,
// kernels are written from their activity records alone and placed among the library calls by
// correlation id. A library call's place is the correlation id CUPTI gives a marker call made by
// the wrappers (cuDriverGetVersion, the only driver function with a callback then): about 0.1 us
// per marker on the H200, against about 0.6-0.9 us per launch for the launch callbacks.
#pragma once

#include <cstdint>

#include "detrace/db/writer.h"

namespace detrace::tracer {

// Whether the capture running now places kernel records by correlation id (no launch callbacks).
bool placementByRecords();

// Makes a marker call and returns its correlation id; 0 when placement is off or the marker
// callback did not fire. Any thread, any time; never throws.
uint64_t markerCorrelation() noexcept;

// The trace's id (streams.id) of the stream `handle` that a library call names, keyed as the
// records of the kernels on that stream are, so that a call and its kernels share one stream in
// the trace: by CUPTI's stream id when kernels are placed by correlation id, by the handle
// otherwise; `device` -1: the current context's. `record_stream` gets the id when it is keyed as
// kernel records are (a placement window then takes records of that stream only), else
// db::kUnset. Never throws.
int64_t opStreamId(db::TraceWriter& w, int64_t handle, int32_t device, int64_t& record_stream) noexcept;

}  // namespace detrace::tracer
