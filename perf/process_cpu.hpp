// The process's CPU time so far (user + system, all threads), for benchmarks that report CPU
// per operation beside wall time.
#pragma once

#include <sys/resource.h>

namespace perf {

inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace perf
