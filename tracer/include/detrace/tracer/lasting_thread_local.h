// Per-thread state of the tracer's hooks that stays usable after its thread's thread_local
// destructors ran.
//
// The main thread runs them inside exit(), before the static destructors and atexit handlers,
// and those may still call CUDA, cuBLAS or NCCL through the tracer (a library's global object
// freeing its buffers, a last collective): a thread_local with a destructor would then be used
// after it was destroyed, writing into freed memory of the host. This state lives on the heap
// instead; a thread_local with a destructor frees it when the thread exits, and a use after that
// makes it again, left to the process's end.
#pragma once

#include <new>

namespace detrace::tracer {

namespace lasting_detail {

template <typename T, typename Tag>
[[gnu::noinline]] T& make(T*& state) {
  thread_local bool reaped = false;  // trivially destructible: readable to the thread's end
  state = new (std::nothrow) T();
  if (state == nullptr) {  // out of memory: a plain thread_local, as before
    thread_local T fallback;
    return fallback;
  }
  if (!reaped) {
    struct Reaper {
      T** slot;
      bool* reaped;
      ~Reaper() {
        delete *slot;
        *slot = nullptr;
        *reaped = true;
      }
    };
    thread_local Reaper reaper{&state, &reaped};
    (void)reaper;
  }
  return *state;
}

}  // namespace lasting_detail

// This thread's T, made at its first use (T must be default-constructible). `Tag` tells apart two
// states of one type.
template <typename T, typename Tag = T>
T& lastingThreadLocal() {
  thread_local T* state = nullptr;  // trivially destructible
  if (state != nullptr) [[likely]] return *state;
  return lasting_detail::make<T, Tag>(state);
}

}  // namespace detrace::tracer
