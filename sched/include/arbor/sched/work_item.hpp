// WorkItem: the unit the scheduler runs.
//
// Intrusive: the caller owns the memory and embeds a WorkItem in it, so submitting never
// allocates. The scheduler calls `fn` exactly once per submission, either to run the item
// (Disposition::run) or, if the scheduler stops before it could, to let the owner release it
// (Disposition::drop). `next` belongs to whichever queue holds the item.
#pragma once

#include <type_traits>

namespace arbor::sched {

enum class Disposition : bool { run, drop };

struct WorkItem {
  using Fn = void (*)(WorkItem* self, Disposition disposition) noexcept;

  explicit WorkItem(Fn function) noexcept : fn(function) {}

  Fn fn;
  WorkItem* next = nullptr;
};

/// The object a work item lives in, from the item its function receives (the intrusive idiom).
/// Two shapes make the cast exact, with no offset arithmetic:
///  - `Outer` derives from WorkItem: a base-to-derived static_cast, valid whatever Outer's
///    layout. Use this one for any owner holding library types (a unique_ptr, an optional...):
///    whether those are standard-layout is up to the library and the compiler (libstdc++ 12's
///    unique_ptr is to GCC, not to clang 14), so a layout check on such an owner is not portable.
///  - `Outer` is standard-layout with the WorkItem as its first member (each such type says so
///    with a static_assert beside its definition), which makes the two pointer-interconvertible.
template <class Outer>
Outer& owner_of(WorkItem* item) noexcept {
  if constexpr (std::is_base_of_v<WorkItem, Outer>) {
    return static_cast<Outer&>(*item);
  } else {
    static_assert(std::is_standard_layout_v<Outer>,
                  "owner_of needs an owner derived from WorkItem or a standard-layout one");
    return *reinterpret_cast<Outer*>(item);
  }
}

}  // namespace arbor::sched
