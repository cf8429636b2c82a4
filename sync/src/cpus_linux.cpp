// Linux: the affinity mask, so that a process pinned by taskset or a cgroup cpuset does not
// plan for CPUs it may not use.
#include <sched.h>

#include <thread>

#include "arbor/sync/spin.hpp"

namespace arbor::sync {

unsigned available_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace arbor::sync
