// PollerPolicy: whether a poller may preempt the thread running on its CPU when the kernel
// wakes it.
//
// Under load, pollers and workers share cores (always, on small machines), and a poller woken
// for every completion switches the worker out in the middle of the batch it is running:
// measured on the pinned echo benchmark, that doubled server CPU per message. A batch
// scheduling class (Linux SCHED_BATCH) stops it: the worker finishes its batch, then the
// poller runs and hands over the next one. But such a thread also waits for the tick
// (milliseconds) to get a CPU that anything else is using, which turns a lightly loaded
// server's microseconds into milliseconds. So the poller asks for batch priority when it keeps
// finding a worker busy as it wakes (it would preempt that worker), and drops it after a run of
// waits that each returned at most one event (light load: nothing to batch, and latency is
// what matters). In batch mode the poller usually runs just after the workers park, so
// "workers busy" is no signal there; batch size is. The priority changes only on these
// transitions (a system call each).
//
// The decision is the same everywhere; only set_batch_priority() is per platform
// (linux/batch_priority.cpp; elsewhere common/batch_priority_none.cpp, which has no such class).
#pragma once

#include <cstddef>

namespace arbor::io {

/// Gives the calling thread batch (true) or normal (false) scheduling priority. False if the
/// platform has no such thing or refused.
bool set_batch_priority(bool batch) noexcept;

class PollerPolicy {
 public:
  /// After each wait: whether a worker was busy as the poller woke, and how many events it got.
  void observe(bool workers_busy, std::size_t events) noexcept {
    if (!batch_) {
      busy_ = workers_busy ? busy_ + 1 : 0;
      if (busy_ >= kSwitchAfter) set(true);
    } else {
      quiet_ = events <= 1 ? quiet_ + 1 : 0;
      if (quiet_ >= kQuietWaits) set(false);
    }
  }

 private:
  static constexpr int kSwitchAfter = 2;
  static constexpr int kQuietWaits = 16;
  void set(bool batch) noexcept {
    if (set_batch_priority(batch)) batch_ = batch;
    busy_ = quiet_ = 0;
  }
  bool batch_ = false;
  int busy_ = 0;
  int quiet_ = 0;
};

}  // namespace arbor::io
