// Timer: a pending timer, owned by whoever waits on it (an awaiter in a coroutine frame),
// measured on now_ns() (arbor/io/clock.hpp). Engine::add_timer() queues one; the engine keeps
// pending timers in its TimerQueue (io/src/common/timer_queue.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "arbor/io/clock.hpp"
#include "arbor/sched/event_pool.hpp"

namespace arbor::io {

/// A pending timer, owned by the waiter. `handler` is delivered as an Event with target = this
/// and result 0 when it fires, or -ECANCELED when it is cancelled.
struct Timer {
  std::int64_t deadline_ns = 0;
  sched::Event::Handler handler = nullptr;
  std::size_t heap_index = kNotQueued;
  bool cancelled = false;  // guarded by the engine's timer queue; a cancelled one is never queued
  static constexpr std::size_t kNotQueued = ~std::size_t{0};
};

}  // namespace arbor::io
