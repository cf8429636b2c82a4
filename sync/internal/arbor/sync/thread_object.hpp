// A per-thread object, created on the thread's first call and destroyed when the thread exits:
// what a function-local `thread_local T` is, except on Windows, where mingw-w64 cannot be
// trusted with it. mingw keeps thread_local objects in emutls storage, which libgcc frees at
// thread exit from a winpthreads key destructor that runs before the one libstdc++ registered
// for the object's destructor, so the destructor runs on freed memory (it crashed worker exits
// under wine). There the object lives on the heap under a fiber-local slot, whose callback runs
// at thread exit before either and gets the object itself, reading no thread-local storage.
// Not for users (sync/internal, never installed): arbor's layers reach it through the
// build-only target arbor_sync_internal.
#pragma once

#include <cstdint>
#include <new>

namespace arbor::sync {

#if defined(_WIN32)
namespace detail {
inline constexpr std::uint32_t kNoSlot = 0xFFFFFFFFu;
/// A fiber-local slot whose value `destroy` gets at thread exit; kNoSlot if none is left.
std::uint32_t fls_alloc(void (*destroy)(void*)) noexcept;
void* fls_get(std::uint32_t slot) noexcept;
bool fls_set(std::uint32_t slot, void* value) noexcept;
}  // namespace detail
#endif

/// The calling thread's T (default-constructed on its first call, destroyed at its exit), or
/// nullptr if none can be had (Windows only: no slot or no memory); callers fall back to a
/// shared path then. Each T is one object per thread, whichever function asks.
template <class T>
T* this_thread_object() noexcept {
#if defined(_WIN32)
  static const std::uint32_t slot =
      detail::fls_alloc([](void* object) { delete static_cast<T*>(object); });
  if (slot == detail::kNoSlot) return nullptr;
  if (auto* object = static_cast<T*>(detail::fls_get(slot))) return object;
  auto* object = new (std::nothrow) T;
  if (object != nullptr && !detail::fls_set(slot, object)) {
    delete object;
    return nullptr;
  }
  return object;
#else
  thread_local T object;
  return &object;
#endif
}

}  // namespace arbor::sync
