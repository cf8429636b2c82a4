// The clock timers are measured on: steady_clock, unless a test has paused it.
//
// A paused clock stands still for the whole process until it is advanced, explicitly
// (advance_clock) or by an engine whose runtime has nothing left to do but wait for a timer:
// every worker parked, nothing queued and nothing ready in the engine, seen twice in a row
// (the engine's timer watcher then jumps it to that timer's deadline). It never goes backwards:
// when it runs again it goes on from where it was left, offset from steady_clock by what was
// advanced. arbor::TestClock (runtime/) is the public face of this; engines, timers and the HTTP
// server's deadlines all read now_ns(), so they agree on the time.
#pragma once

#include <cstdint>

namespace arbor::io {

/// Nanoseconds on the timers' clock: steady_clock's (plus what a test advanced), or the paused
/// value. Costs one steady_clock read, three atomic loads and a fence; never before a value
/// any thread read earlier.
std::int64_t now_ns() noexcept;

/// True while the clock is paused.
bool clock_paused() noexcept;
/// Stops the clock at its current value. False (nothing changed) if it is paused already.
bool pause_clock() noexcept;
/// Lets it run again from its current value. False if it was not paused.
bool resume_clock() noexcept;
/// While paused: moves it forward by `ns` (≥ 0), at most to the end of time (INT64_MAX).
/// False if it is not paused.
bool advance_clock(std::int64_t ns) noexcept;
/// While paused: moves it forward to `ns` if it stands before it. False if it is not paused.
bool advance_clock_to(std::int64_t ns) noexcept;

}  // namespace arbor::io
