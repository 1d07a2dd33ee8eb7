// Placement by correlation id (reorder_buffer.h): when a capture runs without launch callbacks,
// kernels are written from their activity records alone and placed among the library calls by
// correlation id. A library call's place is the correlation id CUPTI gives a marker call made by
// the wrappers (cuDriverGetVersion, the only driver function with a callback then): about 0.1 us
// per marker on the H200, against about 0.6-0.9 us per launch for the launch callbacks.
#pragma once

#include <cstdint>

namespace detrace::tracer {

// Whether the capture running now places kernel records by correlation id (no launch callbacks).
bool placementByRecords();

// Makes a marker call and returns its correlation id; 0 when placement is off or the marker
// callback did not fire. Any thread, any time; never throws.
uint64_t markerCorrelation() noexcept;

}  // namespace detrace::tracer
