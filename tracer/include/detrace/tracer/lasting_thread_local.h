// Per-thread state of the tracer's hooks that stays usable after its thread's thread_local
// destructors ran.
//
// The main thread runs them inside exit(), before the static destructors and atexit handlers,
// and those may still call CUDA, cuBLAS or NCCL through the tracer (a library's global object
// freeing its buffers, a last collective): a thread_local with a destructor would then be used
// after it was destroyed, writing into freed memory of the host. This state is built in
// trivially destructible per-thread storage instead, and destroyed by a thread_local that the
// thread's first use registers. A use after that builds it again in the same storage, never to be
// destroyed: what it allocates then is left to the process's (or the thread's) end.
#pragma once

#include <new>
#include <type_traits>

namespace detrace::tracer {

namespace lasting_detail {

template <typename T, typename Tag>
[[gnu::noinline]] T& make(T*& state, unsigned char* storage) noexcept {
  thread_local bool reaped = false;  // trivially destructible: readable to the thread's end
  state = ::new (static_cast<void*>(storage)) T();
  if (!reaped) {
    struct Reaper {
      T** slot;
      bool* reaped;
      ~Reaper() {
        T* dying = *slot;  // unreachable before its destructor runs
        *slot = nullptr;
        *reaped = true;
        if (dying != nullptr) dying->~T();
      }
    };
    thread_local Reaper reaper{&state, &reaped};
    (void)reaper;
  }
  return *state;
}

}  // namespace lasting_detail

// This thread's T, built at its first use. `Tag` names the state: two uses with one tag share it,
// so each owner passes a type of its own (a local struct).
template <typename T, typename Tag>
T& lastingThreadLocal() noexcept {
  static_assert(std::is_nothrow_default_constructible_v<T>, "built inside noexcept hooks");
  alignas(T) thread_local unsigned char storage[sizeof(T)];  // trivially destructible
  thread_local T* state = nullptr;
  if (state != nullptr) [[likely]] return *state;
  return lasting_detail::make<T, Tag>(state, storage);
}

}  // namespace detrace::tracer
