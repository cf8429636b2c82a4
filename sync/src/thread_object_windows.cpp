// The fiber-local slots behind sync::this_thread_object() on Windows (see thread_object.hpp).
#include <windows.h>

#include "arbor/sync/thread_object.hpp"

namespace arbor::sync::detail {

static_assert(sizeof(DWORD) == sizeof(std::uint32_t) && FLS_OUT_OF_INDEXES == kNoSlot);

std::uint32_t fls_alloc(void (*destroy)(void*)) noexcept {
  // x64 has one calling convention, so a plain function is a PFLS_CALLBACK_FUNCTION (WINAPI).
  static_assert(sizeof(void*) == 8, "32-bit Windows would need a WINAPI trampoline here");
  return ::FlsAlloc(reinterpret_cast<PFLS_CALLBACK_FUNCTION>(destroy));
}

void* fls_get(std::uint32_t slot) noexcept {
  return ::FlsGetValue(slot);
}

bool fls_set(std::uint32_t slot, void* value) noexcept {
  return ::FlsSetValue(slot, value) != FALSE;
}

}  // namespace arbor::sync::detail
