#include "arbor/runtime/interval.hpp"

#include <limits>
#include <stdexcept>

namespace arbor {
namespace {

// t + d (d > 0), or the end of time if that does not fit: a period of years stays a far
// deadline. max() - d cannot overflow for d > 0, whatever t is (max() - t did for a t before
// the clock's epoch: TestClockTest.AnIntervalStartingBeforeTheEpochKeepsItsGrid).
Clock::time_point saturating_add(Clock::time_point t, Clock::duration d) noexcept {
  if (t > Clock::time_point::max() - d) return Clock::time_point::max();
  return t + d;
}

}  // namespace

Interval::Interval(Clock::time_point start, Clock::duration period, MissedTicks missed)
    : next_(start), period_(period), missed_(missed) {
  if (period <= Clock::duration::zero())
    throw std::invalid_argument("arbor::Interval: the period must be positive");
}

void Interval::reset() noexcept {
  next_ = saturating_add(Clock::now(), period_);
}

Clock::time_point Interval::take() noexcept {
  const Clock::time_point due = next_;
  const Clock::time_point now = Clock::now();
  next_ = saturating_add(due, period_);
  if (next_ > now) return due;  // on time: the next point of the grid
  switch (missed_) {
    case MissedTicks::burst:
      break;  // the missed ticks are due already: they complete one by one
    case MissedTicks::delay:
      next_ = saturating_add(now, period_);
      break;
    case MissedTicks::skip:
      // The first grid point after now: due + period · (whole periods elapsed + 1).
      next_ = saturating_add(due, period_ * ((now - due) / period_ + 1));
      break;
  }
  return due;
}

}  // namespace arbor
