// The tracer's dlsym (dlsym_hook.cc): NCCL and cuBLAS entry points looked up through a handle of
// their library get the tracer's wrappers, as calls through the program's links do.
#pragma once

namespace detrace::tracer {

// glibc's dlsym, for the tracer's own lookups (never the hook's answer).
void* realDlsym(void* handle, const char* name);

// What a lookup of `name` that found `sym` should return: the tracer's wrapper of `name` when
// there is one and it forwards to exactly `sym`, else `sym`.
void* wrapperFor(const char* name, void* sym) noexcept;

}  // namespace detrace::tracer
