// Platforms without a batch scheduling class: pollers keep normal priority.
#include "common/poller_policy.hpp"

namespace arbor::io {

bool set_batch_priority(bool) noexcept {
  return false;
}

}  // namespace arbor::io
