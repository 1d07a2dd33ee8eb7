// NVTX ranges and marks as marker events. NVTX reaches CUPTI when NVTX_INJECTION64_PATH names the
// CUPTI library (`detrace record` sets it); CUPTI then calls the tracer's subscriber with the
// NVTX domain. Push/pop ranges become kRangeStart/kRangeEnd markers (value = nesting depth on the
// calling thread), start/end ranges carry their range id, marks are kInstant. Ranges whose text
// starts with the step prefix drive the recording window's step count.
#pragma once

#include <cupti.h>

namespace detrace::tracer {

// Handles one NVTX-domain callback (`data` is a CUpti_NvtxData). Never throws.
void onNvtxCallback(CUpti_CallbackId cbid, const void* data) noexcept;

}  // namespace detrace::tracer
