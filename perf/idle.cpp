// perf/idle: how fast idle workers give their cores back.
//
//   idle [--threads N]
// Runs a burst of 100,000 items, then reports (1) how long after the last item every worker
// was parked, polled every 100 µs, and (2) the process's CPU time (getrusage) over the next
// 5 s of idleness, as a percentage of one core. Targets: < 50 ms and < 1 %.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "arbor/sched/scheduler.hpp"
#include "arbor/sync/thread_blocker.hpp"
#include "process_cpu.hpp"

namespace {

using arbor::sched::Disposition;
using arbor::sched::WorkItem;

std::atomic<int> left{0};
arbor::sync::ThreadBlocker done;

struct Item : WorkItem {
  Item()
      : WorkItem([](WorkItem*, Disposition) noexcept {
          if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) done.wake();
        }) {}
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  if (argc == 3 && std::strcmp(argv[1], "--threads") == 0) threads = std::atoi(argv[2]);
  arbor::sched::SchedulerOptions options;
  if (threads > 0) options.workers = threads;
  arbor::sched::Scheduler scheduler(options);

  constexpr int kItems = 100'000;
  auto items = std::make_unique<Item[]>(kItems);
  left = kItems;
  for (int i = 0; i < kItems; ++i)
    scheduler.submit(items[i]);
  done.wait();

  const auto burst_end = std::chrono::steady_clock::now();
  while (scheduler.parked_workers() < scheduler.workers()) {
    if (std::chrono::steady_clock::now() - burst_end > std::chrono::seconds(5)) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // a sampling interval
  }
  const double park_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - burst_end)
          .count();
  const bool all_parked = scheduler.parked_workers() == scheduler.workers();

  const double cpu_before = perf::process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(5));  // the idle window being measured
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_pct = 100.0 * (perf::process_cpu_seconds() - cpu_before) / wall;

  std::printf(
      "arbor | idle | %d workers | all parked %s %.2f ms after the burst | idle CPU %.3f %% of a "
      "core over %.1f s\n",
      scheduler.workers(), all_parked ? "within" : "NOT within", park_ms, cpu_pct, wall);
  return 0;
}
