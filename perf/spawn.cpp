// perf/spawn on arbor: see spawn_common.hpp. Items are intrusive and preallocated, so the timed
// part measures queueing and scheduling only. Fan-out uses prefer-local submits (the default
// for work created by work).
#include <atomic>
#include <memory>

#include "arbor/sched/scheduler.hpp"
#include "arbor/sync/thread_blocker.hpp"
#include "spawn_common.hpp"

namespace {

using arbor::sched::Disposition;
using arbor::sched::Scheduler;
using arbor::sched::WorkItem;

struct Shared {
  std::atomic<std::int64_t> left;
  arbor::sync::ThreadBlocker done;
  struct Item* items;
  std::int64_t count;
  bool inside;
};

struct Item : WorkItem {
  Item() : WorkItem(&run) {}
  static void run(WorkItem* self, Disposition) noexcept {
    auto* item = static_cast<Item*>(self);
    Shared& s = *item->shared;
    if (s.inside) {
      const std::int64_t i = item - s.items;
      for (std::int64_t child = 2 * i + 1; child <= 2 * i + 2 && child < s.count; ++child)
        Scheduler::current()->submit(s.items[child], /*prefer_local=*/true);
    }
    if (s.left.fetch_sub(1, std::memory_order_acq_rel) == 1) s.done.wake();
  }
  Shared* shared = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const spawn_bench::Config c = spawn_bench::parse(argc, argv);
  auto items = std::make_unique<Item[]>(static_cast<std::size_t>(c.items));
  Shared shared{{c.items}, {}, items.get(), c.items, c.inside};
  for (std::int64_t i = 0; i < c.items; ++i)
    items[i].shared = &shared;
  Scheduler scheduler(arbor::sched::SchedulerOptions{.workers = c.threads});

  const auto start = std::chrono::steady_clock::now();
  if (c.inside) {
    scheduler.submit(items[0]);
  } else {
    for (std::int64_t i = 0; i < c.items; ++i)
      scheduler.submit(items[i]);
  }
  shared.done.wait();
  spawn_bench::report("arbor", c, std::chrono::steady_clock::now() - start);
  auto counters = scheduler.counters();
  std::printf("arbor | parks %llu | wakes %llu | steals %llu | spins %llu (%llu found work)\n",
              static_cast<unsigned long long>(counters.parks),
              static_cast<unsigned long long>(counters.wakes),
              static_cast<unsigned long long>(counters.steals),
              static_cast<unsigned long long>(counters.spins),
              static_cast<unsigned long long>(counters.spins_found_work));
  return 0;
}
