// Windows: the process affinity mask, as on Linux (start /affinity, job objects).
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <bit>
#include <cstdint>
#include <thread>

#include "arbor/sync/spin.hpp"

namespace arbor::sync {

unsigned available_cpus() noexcept {
  DWORD_PTR process = 0;
  DWORD_PTR system = 0;
  // The mask describes one processor group; a process whose threads span several groups gets
  // zero here, and then every logical processor is its to use.
  if (GetProcessAffinityMask(GetCurrentProcess(), &process, &system) && process != 0)
    return static_cast<unsigned>(std::popcount(static_cast<std::uint64_t>(process)));
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace arbor::sync
