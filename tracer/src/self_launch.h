// The tracer's own GPU work (digest kernels) must not appear in the trace. Launches made inside a
// SelfLaunchScope take no slot in the reorder buffer, and activity records of kernels whose name
// starts with kSelfKernelPrefix (every detrace kernel is extern "C" detrace_*) are dropped.
#pragma once

#include <cstring>

namespace detrace::tracer {

inline constexpr const char* kSelfKernelPrefix = "detrace_";

inline bool& selfLaunchFlag() {
  static thread_local bool flag = false;
  return flag;
}

class SelfLaunchScope {
 public:
  SelfLaunchScope() : saved_(selfLaunchFlag()) { selfLaunchFlag() = true; }
  ~SelfLaunchScope() { selfLaunchFlag() = saved_; }
  SelfLaunchScope(const SelfLaunchScope&) = delete;
  SelfLaunchScope& operator=(const SelfLaunchScope&) = delete;

 private:
  bool saved_;
};

inline bool isSelfKernel(const char* name) {
  return name != nullptr && std::strncmp(name, kSelfKernelPrefix, std::strlen(kSelfKernelPrefix)) == 0;
}

}  // namespace detrace::tracer
