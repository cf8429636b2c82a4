#include "arbor/sync/thread_blocker.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace arbor::sync {
namespace {

using namespace std::chrono_literals;

TEST(ThreadBlocker, WakeBeforeWaitIsKept) {
  ThreadBlocker b;
  b.wake();
  b.wait();  // would hang if the early wake were lost
  EXPECT_FALSE(b.wait_for(1ms)) << "the signal must have been consumed";
}

TEST(ThreadBlocker, SeveralWakesCountAsOne) {
  ThreadBlocker b;
  b.wake();
  b.wake();
  EXPECT_TRUE(b.wait_for(1ms));
  EXPECT_FALSE(b.wait_for(1ms));
}

TEST(ThreadBlocker, TimedWaitTimesOutNotEarly) {
  ThreadBlocker b;
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(b.wait_for(3ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 3ms);
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

TEST(ThreadBlocker, TimedWaitRacingAWake) {
  // A wake landing around the deadline must be either consumed (true) or left for the next wait.
  ThreadBlocker b;
  for (int i = 0; i < 2'000; ++i) {
    std::thread t([&] { b.wake(); });
    bool got = b.wait_for(std::chrono::microseconds(i % 50));
    t.join();
    if (!got) {
      EXPECT_TRUE(b.wait_for(1s)) << "a wake was lost at round " << i;
    }
  }
}

}  // namespace
}  // namespace arbor::sync
