// perf/hot_paths: the scheduler's per-event and per-item overhead, for instruction counts.
//
//   hot_paths trees|global [BATCH] [ROUNDS] [--threads N]
// A producer thread (not a worker, like an engine poller) submits BATCH units and waits until
// the last one has run, ROUNDS times (defaults 256 and 2,000; 2 workers):
//   trees   BATCH events through submit_event_trees (trees of 16): the EventPool's acquire and
//           release, one global push per batch, tree nodes through the local queues.
//   global  BATCH plain work items as one chain through submit_batch: the global queue drained
//           by the workers.
// The handlers do no work of their own, so what is left is the scheduler's overhead. Meant to run
// under callgrind with ARBOR_SPIN=none (a time-based spin budget turns into an arbitrary number
// of instructions under an instruction counter); the commands and the figures are in
// docs/benchmarks.md ("Hot-path locks"). Wall time is printed for orientation only.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "arbor/sched/event_tree.hpp"
#include "arbor/sync/thread_blocker.hpp"

namespace {

using arbor::sched::Disposition;
using arbor::sched::Event;
using arbor::sched::WorkItem;

struct Batch {
  std::atomic<std::uint32_t> left{0};
  arbor::sync::ThreadBlocker done;
  void one_done() noexcept {
    if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) done.wake();
  }
};

void on_event(const Event& e, Disposition) noexcept {
  static_cast<Batch*>(e.target)->one_done();
}

struct Item : WorkItem {
  explicit Item(Batch* b) noexcept : WorkItem(&run), batch(b) {}
  static void run(WorkItem* self, Disposition) noexcept {
    static_cast<Item*>(self)->batch->one_done();
  }
  Batch* batch;
};

}  // namespace

int main(int argc, char** argv) {
  bool trees = true;
  std::size_t batch_size = 256;
  int rounds = 2'000;
  int threads = 2;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (positional == 0 &&
               (std::strcmp(argv[i], "trees") == 0 || std::strcmp(argv[i], "global") == 0)) {
      trees = argv[i][0] == 't';
      ++positional;
    } else if (positional <= 1) {
      batch_size = static_cast<std::size_t>(std::atoll(argv[i]));
      positional = 2;
    } else {
      rounds = std::atoi(argv[i]);
    }
  }
  if (batch_size == 0 || rounds <= 0 || threads <= 0) {
    std::fprintf(stderr, "usage: %s trees|global [BATCH] [ROUNDS] [--threads N]\n", argv[0]);
    return 2;
  }
  arbor::sched::Scheduler scheduler(arbor::sched::SchedulerOptions{.workers = threads});
  arbor::sched::EventPool pool(1024);
  Batch batch;
  std::vector<Event> events(batch_size, Event{&on_event, &batch, 0, 0});
  std::vector<Item> items(batch_size, Item(&batch));

  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    batch.left.store(static_cast<std::uint32_t>(batch_size), std::memory_order_relaxed);
    if (trees) {
      arbor::sched::submit_event_trees(scheduler, pool, events, 16);
    } else {
      for (std::size_t i = 0; i + 1 < batch_size; ++i)
        items[i].next = &items[i + 1];
      scheduler.submit_batch(&items.front(), &items.back(), batch_size, batch_size);
    }
    batch.done.wait();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto c = scheduler.counters();
  std::printf(
      "%s: %d rounds of %zu on %d workers, %.0f ns per unit (wall, informational); "
      "steals %llu, parks %llu, pool allocated %llu\n",
      trees ? "trees" : "global", rounds, batch_size, scheduler.workers(),
      seconds * 1e9 / (static_cast<double>(rounds) * static_cast<double>(batch_size)),
      static_cast<unsigned long long>(c.steals), static_cast<unsigned long long>(c.parks),
      static_cast<unsigned long long>(pool.allocated()));
  return 0;
}
