// Platforms without an affinity query arbor uses (macOS has no affinity masks): every
// logical CPU.
#include <thread>

#include "arbor/sync/spin.hpp"

namespace arbor::sync {

unsigned available_cpus() noexcept {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace arbor::sync
