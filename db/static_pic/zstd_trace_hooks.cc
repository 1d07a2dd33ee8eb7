// zstd's tracing hooks, answered "no" inside the library that links the static zstd.
//
// libzstd (1.5.x) calls ZSTD_trace_{compress,decompress}_{begin,end} when a program defines them:
// it references them as weak symbols. In libdetrace_tracer.so those references would be resolved
// against the host program's own definitions, so a host built with zstd tracing would be handed
// our compression contexts. Defining them here (hidden, linked as an object so the weak references
// bind to it) keeps our zstd to ourselves. begin returning 0 turns tracing off, so the end hooks
// are never called. The parameter types are zstd's opaque pointers, passed through unread.
extern "C" {

unsigned long long ZSTD_trace_compress_begin(const void* /*cctx*/) { return 0; }
void ZSTD_trace_compress_end(unsigned long long /*ctx*/, const void* /*trace*/) {}
unsigned long long ZSTD_trace_decompress_begin(const void* /*dctx*/) { return 0; }
void ZSTD_trace_decompress_end(unsigned long long /*ctx*/, const void* /*trace*/) {}

}  // extern "C"
