// perf/task_spawn: what Runtime::spawn costs per task, end to end (frame, submit, run, finish).
//
//   task_spawn [plain|abortable] [TASKS] [ROUNDS]     (defaults plain, 1,000,000, 5)
// One task spawns TASKS trivial detached tasks and waits until all have run; the median of
// ROUNDS rounds is printed as ns per task. `abortable` uses Runtime::spawn_abortable (a stop
// source of its own per task), to show what abort() costs the tasks that ask for it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "arbor/arbor.hpp"
#include "arbor/sync/thread_blocker.hpp"

namespace {

std::atomic<std::int64_t> left{0};
arbor::sync::ThreadBlocker all_done;

arbor::Task<> trivial() {
  if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) all_done.wake();
  co_return;
}

arbor::Task<> spawner(arbor::Runtime& rt, std::int64_t n, bool abortable) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (abortable)
      rt.spawn_abortable(trivial()).detach();
    else
      rt.spawn(trivial()).detach();
  }
  co_return;
}

}  // namespace

int main(int argc, char** argv) {
  const bool abortable = argc > 1 && std::strcmp(argv[1], "abortable") == 0;
  const std::int64_t tasks = argc > 2 ? std::atoll(argv[2]) : 1'000'000;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  arbor::Runtime rt;
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    left.store(tasks, std::memory_order_relaxed);
    const auto start = std::chrono::steady_clock::now();
    rt.spawn(spawner(rt, tasks, abortable)).detach();
    all_done.wait();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ns.push_back(std::chrono::duration<double, std::nano>(elapsed).count() /
                 static_cast<double>(tasks));
  }
  std::sort(ns.begin(), ns.end());
  std::printf("task_spawn %s | %.1f ns/task (median of %d rounds, %lld tasks)\n",
              abortable ? "abortable" : "plain", ns[ns.size() / 2], rounds,
              static_cast<long long>(tasks));
}
