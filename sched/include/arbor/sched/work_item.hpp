// WorkItem: the unit the scheduler runs.
//
// Intrusive: the caller owns the memory and embeds a WorkItem in it, so submitting never
// allocates. The scheduler calls `fn` exactly once per submission, either to run the item
// (Disposition::run) or, if the scheduler stops before it could, to let the owner release it
// (Disposition::drop). `next` belongs to whichever queue holds the item.
#pragma once

namespace arbor::sched {

enum class Disposition : bool { run, drop };

struct WorkItem {
  using Fn = void (*)(WorkItem* self, Disposition disposition) noexcept;

  explicit WorkItem(Fn function) noexcept : fn(function) {}

  Fn fn;
  WorkItem* next = nullptr;
};

}  // namespace arbor::sched
