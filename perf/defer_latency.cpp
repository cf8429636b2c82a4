// perf/defer_latency: how long a child waits when the item that queued it keeps running.
//
//   defer_latency [--threads N] [--parent-ms N] [--trials K]
//     --threads    workers (default: the CPUs available; at least 2, or nobody is free)
//     --parent-ms  how long the parent keeps running after queueing the child (default 20)
//     --trials     trials per mode (default 100)
//
// One trial: an external submit starts the parent; the parent waits until every other worker
// is parked (so no searcher can take the child by chance, the worst case), queues the child,
// then busy-runs --parent-ms more. The child records when it started. Latency = child start
// minus the moment it was queued, steady_clock. Run twice: the child queued prefer_local (as a
// coroutine resuming another is) and to the global queue. Prints p50/p99/max and how many
// children waited for their parent to end; the target is p99 <= 200 µs with a worker free.
// Between trials the main thread waits for the parent to end, so trials do not overlap.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "arbor/sched/scheduler.hpp"
#include "arbor/sync/thread_blocker.hpp"

namespace {

using arbor::sched::Disposition;
using arbor::sched::Scheduler;
using arbor::sched::WorkItem;
using Clock = std::chrono::steady_clock;

struct Trial {
  Scheduler* scheduler = nullptr;
  bool prefer_local = false;
  Clock::duration parent_runs{};
  bool others_parked = false;  // the parent saw every other worker parked before queueing
  Clock::time_point queued_at{};
  // Written by the child, read by main after both items ended (the blockers order it).
  Clock::time_point started_at{};
  arbor::sync::ThreadBlocker child_done;
  arbor::sync::ThreadBlocker parent_done;

  struct Step : WorkItem {
    Step(Trial* t, Fn f) : WorkItem(f), trial(t) {}
    Trial* trial;
  };
  Step child{this, [](WorkItem* self, Disposition) noexcept {
               Trial* t = static_cast<Step*>(self)->trial;
               t->started_at = Clock::now();
               t->child_done.wake();
             }};
  Step parent{this, [](WorkItem* self, Disposition d) noexcept {
                Trial* t = static_cast<Step*>(self)->trial;
                if (d == Disposition::run) {
                  // Worst case: nobody else awake. A bounded wait; a trial that never saw it
                  // is reported, not hidden.
                  const auto give_up = Clock::now() + std::chrono::seconds(1);
                  const int others = t->scheduler->workers() - 1;
                  while (t->scheduler->parked_workers() < others && Clock::now() < give_up)
                    std::this_thread::yield();
                  t->others_parked = t->scheduler->parked_workers() >= others;
                  t->queued_at = Clock::now();
                  Scheduler::current()->submit(t->child, t->prefer_local);
                  while (Clock::now() - t->queued_at < t->parent_runs) {
                    // the parent's tail: busy, as a long computation is
                  }
                }
                t->parent_done.wake();
              }};
};

long parse_positive(const char* program, const char* flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%s: %s needs a positive integer, got '%s'\n", program, flag, text);
    std::exit(2);
  }
  return v;
}

double us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void run_mode(Scheduler& scheduler, bool prefer_local, long parent_ms, long trials) {
  std::vector<Clock::duration> latencies;
  latencies.reserve(static_cast<std::size_t>(trials));
  long not_parked = 0;
  for (long i = 0; i < trials; ++i) {
    Trial t;
    t.scheduler = &scheduler;
    t.prefer_local = prefer_local;
    t.parent_runs = std::chrono::milliseconds(parent_ms);
    scheduler.submit(t.parent);
    t.parent_done.wait();
    t.child_done.wait();
    latencies.push_back(t.started_at - t.queued_at);
    not_parked += t.others_parked ? 0 : 1;
  }
  std::sort(latencies.begin(), latencies.end());
  const auto at = [&](double q) {
    const auto n = latencies.size();
    const auto k = static_cast<std::size_t>(q * static_cast<double>(n - 1) + 0.5);
    return latencies[k < n ? k : n - 1];
  };
  const auto waited = std::count_if(latencies.begin(), latencies.end(), [&](Clock::duration d) {
    return d >= std::chrono::milliseconds(parent_ms);
  });
  std::printf(
      "arbor | defer_latency | %d workers | %-12s | parent %ld ms | %ld trials | child start "
      "p50 %8.1f us  p99 %8.1f us  max %8.1f us | %ld waited for the parent",
      scheduler.workers(), prefer_local ? "prefer_local" : "global", parent_ms, trials,
      us(at(0.50)), us(at(0.99)), us(latencies.back()), static_cast<long>(waited));
  if (not_parked > 0) std::printf(" | %ld trials with a worker not parked", not_parked);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  long threads = 0, parent_ms = 20, trials = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 < argc && a == "--threads") {
      threads = parse_positive(argv[0], argv[i], argv[i + 1]);
    } else if (i + 1 < argc && a == "--parent-ms") {
      parent_ms = parse_positive(argv[0], argv[i], argv[i + 1]);
    } else if (i + 1 < argc && a == "--trials") {
      trials = parse_positive(argv[0], argv[i], argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--parent-ms N] [--trials K]\n", argv[0]);
      return 2;
    }
    ++i;
  }
  arbor::sched::SchedulerOptions options;
  if (threads > 0) options.workers = static_cast<int>(threads);
  Scheduler scheduler(options);
  if (scheduler.workers() < 2) {
    std::fprintf(stderr, "%s: needs at least 2 workers (one runs the parent)\n", argv[0]);
    return 2;
  }
  run_mode(scheduler, /*prefer_local=*/true, parent_ms, trials);
  run_mode(scheduler, /*prefer_local=*/false, parent_ms, trials);
  return 0;
}
