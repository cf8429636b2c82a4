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
  io::advance_clock(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace arbor
