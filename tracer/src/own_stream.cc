#include "own_stream.h"

#include <mutex>
#include <unordered_map>

#include "next_symbol.h"

namespace detrace::tracer {

CUstream ownStream() noexcept {
  using CtxGet = CUresult (*)(CUcontext*);
  using StreamCreate = CUresult (*)(CUstream*, unsigned int);
  static const auto ctx_get = reinterpret_cast<CtxGet>(loadedSymbol("cuCtxGetCurrent", "libcuda.so"));
  static const auto stream_create =
      reinterpret_cast<StreamCreate>(loadedSymbol("cuStreamCreate", "libcuda.so"));
  static std::mutex mu;
  static auto* streams = new std::unordered_map<CUcontext, CUstream>();  // never destroyed
  CUcontext ctx = nullptr;
  if (!ctx_get || !stream_create || ctx_get(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  try {
    std::lock_guard lk(mu);
    if (auto it = streams->find(ctx); it != streams->end()) return it->second;
    CUstream s = nullptr;
    if (stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
    if (streams->size() < 1024) (*streams)[ctx] = s;
    return s;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace detrace::tracer
