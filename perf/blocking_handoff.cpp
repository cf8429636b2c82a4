// perf/blocking_handoff: one task hands a trivial job to the blocking pool and awaits it, HANDOFFS
// times in a row, so every result comes back from a thread that was asleep in the kernel (the
// pool thread sleeps between jobs) while the worker, out of work, spins or parks.
//
//   blocking_handoff [HANDOFFS] [ROUNDS]     (defaults 100,000 and 5)
//
// Prints the median over ROUNDS of wall time and process CPU time (user + system, getrusage)
// per hand-off, and the scheduler's spins and spins that found work. Run it under
// `taskset -c 0` to see what the spinner's one-CPU rule costs or saves this producer: the pool
// thread must preempt the worker to hand over its result (AdaptiveSpinner::budget,
// sync/src/spin.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "arbor/arbor.hpp"
#include "arbor/sync/thread_blocker.hpp"
#include "process_cpu.hpp"

namespace {

arbor::sync::ThreadBlocker all_done;

arbor::Task<> handoffs(arbor::Runtime& rt, long n, long& sum) {
  for (long i = 0; i < n; ++i)
    sum += co_await rt.spawn_blocking([i] { return i & 1; });
  all_done.wake();
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 100'000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (n <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: blocking_handoff [HANDOFFS > 0] [ROUNDS > 0]\n");
    return 2;
  }
  arbor::Runtime rt;
  std::vector<double> wall_ns;
  std::vector<double> cpu_ns;
  long sum = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu0 = perf::process_cpu_seconds();
    rt.spawn(handoffs(rt, n, sum)).detach();
    all_done.wait();
    const double cpu1 = perf::process_cpu_seconds();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    wall_ns.push_back(std::chrono::duration<double, std::nano>(elapsed).count() /
                      static_cast<double>(n));
    cpu_ns.push_back((cpu1 - cpu0) * 1e9 / static_cast<double>(n));
  }
  if (sum != rounds * (n / 2)) {  // every job ran once and its result came back
    std::fprintf(stderr, "blocking_handoff: lost results (%ld)\n", sum);
    return 1;
  }
  std::sort(wall_ns.begin(), wall_ns.end());
  std::sort(cpu_ns.begin(), cpu_ns.end());
  const auto stats = rt.scheduler().counters();
  std::printf(
      "blocking_handoff | %.0f ns wall, %.0f ns CPU per hand-off (medians of %d rounds, "
      "%ld hand-offs) | spins %llu, found work %llu\n",
      wall_ns[wall_ns.size() / 2], cpu_ns[cpu_ns.size() / 2], rounds, n,
      static_cast<unsigned long long>(stats.spins),
      static_cast<unsigned long long>(stats.spins_found_work));
}
