#include "own_stream.h"

#include <mutex>
#include <unordered_map>

#include "next_symbol.h"

namespace detrace::tracer {
namespace {

constexpr size_t kMaxContexts = 1024;

struct Streams {
  std::mutex mu;
  std::unordered_map<CUcontext, CUstream> by_context;
};

Streams& streams() {
  static auto* s = new Streams();  // never destroyed: used until the process's very end
  return *s;
}

}  // namespace

CUstream ownStream() noexcept {
  using CtxGet = CUresult (*)(CUcontext*);
  using StreamCreate = CUresult (*)(CUstream*, unsigned int);
  static const auto ctx_get = reinterpret_cast<CtxGet>(loadedSymbol("cuCtxGetCurrent", "libcuda.so"));
  static const auto stream_create =
      reinterpret_cast<StreamCreate>(loadedSymbol("cuStreamCreate", "libcuda.so"));
  CUcontext ctx = nullptr;
  if (!ctx_get || !stream_create || ctx_get(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  try {
    Streams& s = streams();
    std::lock_guard lk(s.mu);
    if (auto it = s.by_context.find(ctx); it != s.by_context.end()) return it->second;
    if (s.by_context.size() >= kMaxContexts) return nullptr;  // never one that is not remembered
    CUstream stream = nullptr;
    if (stream_create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
    s.by_context[ctx] = stream;
    return stream;
  } catch (...) {
    return nullptr;
  }
}

void forgetOwnStream(CUcontext ctx) noexcept {
  try {
    Streams& s = streams();
    std::lock_guard lk(s.mu);
    s.by_context.erase(ctx);  // the stream dies with its context
  } catch (...) {
  }
}

}  // namespace detrace::tracer
