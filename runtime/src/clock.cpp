#include "arbor/runtime/clock.hpp"

#include <stdexcept>

namespace arbor {

TestClock::TestClock() {
  if (!io::pause_clock()) throw std::logic_error("arbor::TestClock: the clock is paused already");
}

TestClock::~TestClock() {
  io::resume_clock();
}

void TestClock::advance(Clock::duration d) {
  if (d < Clock::duration::zero())
    throw std::invalid_argument("arbor::TestClock::advance: a negative duration");
  // Past time_point::max() the clock would wrap to before now (and every timer fire at once).
  if (d > Clock::time_point::max() - Clock::now())
    throw std::overflow_error("arbor::TestClock::advance: past the end of time");
  io::advance_clock(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace arbor
