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
/// `Outer` is standard-layout with the WorkItem as its first member (each such type says so with
/// a static_assert beside its definition), which makes the two pointer-interconvertible: the
/// cast is exact, with no offset arithmetic.
template <class Outer>
Outer& owner_of(WorkItem* item) noexcept {
  static_assert(std::is_standard_layout_v<Outer>, "owner_of needs a standard-layout owner");
  return *reinterpret_cast<Outer*>(item);
}

}  // namespace arbor::sched
