#include "arbor/sync/thread_blocker.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace arbor::sync {
namespace {

using namespace std::chrono_literals;

// Expects `b` to hold no signal: the next wait() must return only after a wake that comes
// later, from another thread. A leftover signal would let it return before `late` is set.
void expect_no_signal_left(ThreadBlocker& b) {
  std::atomic<bool> late{false};
  std::thread t([&] {
    std::this_thread::sleep_for(5ms);
    late = true;
    b.wake();
  });
  b.wait();
  EXPECT_TRUE(late.load()) << "the signal must have been consumed";
  t.join();
}

TEST(ThreadBlocker, WakeBeforeWaitIsKept) {
  ThreadBlocker b;
  b.wake();
  b.wait();  // would hang if the early wake were lost
  expect_no_signal_left(b);
}

TEST(ThreadBlocker, SeveralWakesCountAsOne) {
  ThreadBlocker b;
  b.wake();
  b.wake();
  b.wait();
  expect_no_signal_left(b);
}

TEST(ThreadBlocker, WakeFromAnotherThread) {
  ThreadBlocker b;
  int payload = 0;
  std::thread t([&] {
    payload = 42;  // published by wake()'s release, read after wait()'s acquire
    b.wake();
  });
  b.wait();
  EXPECT_EQ(payload, 42);
  t.join();
}

TEST(ThreadBlocker, PingPong) {
  ThreadBlocker a, b;
  constexpr int kRounds = 20'000;
  int counter = 0;
  std::thread t([&] {
    for (int i = 0; i < kRounds; ++i) {
      a.wait();
      ++counter;
      b.wake();
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    a.wake();
    b.wait();
  }
  t.join();
  EXPECT_EQ(counter, kRounds);
}

}  // namespace
}  // namespace arbor::sync
