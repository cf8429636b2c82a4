// EngineDriver: an engine as the scheduler's driver (sched/driver.hpp), for IoMode::workers.
//
// The worker holding the scheduler's poll right waits on the engine's one epoll set or ring
// (EngineCore::reap: up to K completions plus the expired timers, sleeping no longer than the next
// deadline) and then dispatches them as event trees, the first to its own local queue. The
// buffers are the holder's alone: the poll right passes them from one holder to the next (its
// release/acquire pair in the scheduler orders each holder's use before the next one's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "arbor/sched/driver.hpp"
#include "common/engine_core.hpp"

namespace arbor::io {

class EngineDriver final : public sched::Driver {
 public:
  explicit EngineDriver(EngineCore& engine);

  void wait(std::int64_t timeout_ns) noexcept override;
  void dispatch() noexcept override;
  void unpark() noexcept override;

 private:
  EngineCore& engine_;
  std::vector<sched::Event> events_;  // K IO events and up to K timers
  std::vector<Timer*> fired_;         // scratch for the timers
  std::size_t reaped_ = 0;            // events_[0, reaped_) wait for dispatch()
};

}  // namespace arbor::io
