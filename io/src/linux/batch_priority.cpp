// Linux: batch priority is the SCHED_BATCH scheduling class (see common/poller_policy.hpp).
#include <sched.h>

#include "common/poller_policy.hpp"

namespace arbor::io {

bool set_batch_priority(bool batch) noexcept {
  sched_param param{};
  return ::sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &param) == 0;
}

}  // namespace arbor::io
