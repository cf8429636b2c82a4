// perf/event_trees: choosing the tree bound B for event batches.
//
//   event_trees [BATCH] [ROUNDS] [--threads N]
// An "engine" thread submits BATCH events at a time (default 256, the engines' K) with
// submit_event_trees, waits until the batch has run, and repeats ROUNDS times (default 20,000)
// for each B. Each handler does ~0.5 µs of work. Reported per B: batches/s, and the p50/p99
// time from submit to the batch's last handler. B = 1 degenerates to one global item per event.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "arbor/sched/event_tree.hpp"
#include "arbor/sync/spin.hpp"
#include "arbor/sync/thread_blocker.hpp"

namespace {

using arbor::sched::Disposition;
using arbor::sched::Event;

struct Batch {
  std::atomic<std::uint32_t> left{0};
  arbor::sync::ThreadBlocker done;
};

void handler(const Event& e, Disposition) noexcept {
  for (int i = 0; i < 20; ++i)
    arbor::sync::cpu_relax();  // ~0.5 µs of "request handling"
  auto* batch = static_cast<Batch*>(e.target);
  if (batch->left.fetch_sub(1, std::memory_order_acq_rel) == 1) batch->done.wake();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t batch_size = 256;
  int rounds = 20'000;
  int threads = 0;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (positional++ == 0) {
      batch_size = static_cast<std::size_t>(std::atoll(argv[i]));
    } else {
      rounds = std::atoi(argv[i]);
    }
  }
  if (batch_size == 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: %s [BATCH] [ROUNDS] [--threads N]\n", argv[0]);
    return 2;
  }
  arbor::sched::SchedulerOptions options;
  if (threads > 0) options.workers = threads;
  arbor::sched::Scheduler scheduler(options);
  arbor::sched::EventPool pool(1024);
  Batch batch;
  std::vector<Event> events(batch_size, Event{&handler, &batch, 0, 0});
  std::vector<double> latencies(static_cast<std::size_t>(rounds));

  std::printf("B     | batches/s | p50 µs  | p99 µs   (batch %zu, %d workers)\n", batch_size,
              scheduler.workers());
  for (std::size_t b : {1u, 4u, 8u, 16u, 32u, 64u, 128u, 256u}) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      batch.left.store(static_cast<std::uint32_t>(batch_size), std::memory_order_relaxed);
      arbor::sched::submit_event_trees(scheduler, pool, events, b);
      batch.done.wait();
      latencies[static_cast<std::size_t>(r)] =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::sort(latencies.begin(), latencies.end());
    std::printf("%-5zu | %9.0f | %7.1f | %7.1f\n", b, rounds / seconds,
                latencies[latencies.size() / 2], latencies[latencies.size() * 99 / 100]);
  }
  return 0;
}
