#include "arbor/sync/lifo_semaphore.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "arbor/sync/spin.hpp"

namespace arbor::sync {
namespace {

using namespace std::chrono_literals;

// Waits (yielding, bounded) until the semaphore shows `waiters` parked threads.
void await_waiters(const LifoSemaphore& sem, unsigned waiters) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (sem.counts().waiters != waiters) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "waiters never reached " << waiters;
    std::this_thread::yield();
  }
}

TEST(LifoSemaphore, InitialSignalsAreTakenWithoutBlocking) {
  LifoSemaphore sem(2);
  EXPECT_TRUE(sem.try_wait());
  sem.wait();  // would hang if the second initial signal were missing
  EXPECT_FALSE(sem.try_wait());
  EXPECT_EQ(sem.counts().signals, 0u);
}

TEST(LifoSemaphore, ReleaseWakesAParkedWaiter) {
  LifoSemaphore sem;
  int payload = 0;
  std::thread waiter([&] {
    sem.wait();
    EXPECT_EQ(payload, 7);  // release() publishes what came before it
  });
  await_waiters(sem, 1);
  payload = 7;
  sem.release(1);
  waiter.join();
  EXPECT_EQ(sem.counts().waiters, 0);
}

TEST(LifoSemaphore, WakesTheMostRecentlyParkedFirst) {
  LifoSemaphore sem;
  constexpr int kThreads = 4;
  std::mutex mutex;
  std::vector<int> woken;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      sem.wait();
      std::lock_guard lock(mutex);
      woken.push_back(i);
    });
    await_waiters(sem, static_cast<unsigned>(i + 1));  // park them in a known order
  }
  for (int i = 0; i < kThreads; ++i) {
    sem.release(1);
    // Wait for that wake to land before the next release, so the order is observable.
    auto deadline = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      {
        std::lock_guard lock(mutex);
        if (woken.size() == static_cast<std::size_t>(i + 1)) break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::yield();
    }
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(woken, (std::vector<int>{3, 2, 1, 0}));
}

TEST(LifoSemaphore, ReleaseManyWakesThatMany) {
  LifoSemaphore sem;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i)
    threads.emplace_back([&] {
      sem.wait();
      done.fetch_add(1);
    });
  await_waiters(sem, 5);
  sem.release(3);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (done.load() < 3) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::yield();
  }
  EXPECT_EQ(sem.counts().waiters, 2);
  sem.release(2);
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(done.load(), 5);
  EXPECT_EQ(sem.counts().signals, 0u);
}

// A release chooses the parked waiter, and a try_wait() takes the signal before the waiter runs
// (about half the time here; otherwise the waiter wins and the test only checks that it got the
// signal). The robbed waiter must stop counting as chosen and park again, so that the next
// release wakes it.
TEST(LifoSemaphore, ChosenWaiterParksAgainIfItsSignalIsTaken) {
  LifoSemaphore sem;
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    sem.wait();
    got = true;
  });
  await_waiters(sem, 1);
  sem.release(1);
  if (sem.try_wait()) {
    auto deadline = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      auto c = sem.counts();
      if (c.signaled_to_wake == 0) {
        EXPECT_EQ(c.waiters, 1) << "the woken waiter must have registered again";
        EXPECT_EQ(c.signals, 0u);
        break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the chosen waiter never ran";
      std::this_thread::yield();
    }
    EXPECT_FALSE(got.load());
    sem.release(1);
  }
  waiter.join();
  EXPECT_TRUE(got.load());
  auto c = sem.counts();
  EXPECT_EQ(c.waiters, 0);
  EXPECT_EQ(c.signaled_to_wake, 0);
  EXPECT_EQ(c.signals, 0u);
}

// 10^5 signals released in random chunks against consumers that mix plain waits, try_wait()
// polls and the scheduler's pattern (a bounded try_wait() spin, then a park). Polls steal
// signals from waiters a release has already chosen, so the woken-but-robbed path (park again)
// runs too. Every signal must be consumed exactly once and nobody may stay asleep while a
// signal is available: a lost wakeup hangs the test (ctest timeout).
TEST(LifoSemaphore, NoLostWakeupsUnderRandomInterleavings) {
  LifoSemaphore sem;
  constexpr std::uint64_t kSignals = 100'000;
  constexpr int kConsumers = 4;
  std::atomic<std::uint64_t> consumed{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      std::minstd_rand rng(static_cast<unsigned>(c + 1));
      for (;;) {
        bool got = false;
        switch (rng() % 4) {
          case 0:
            sem.wait();
            got = true;
            break;
          case 1:
            got = sem.try_wait();
            break;
          default:
            // Spin for up to 63 probes (0: park at once), then park.
            for (auto probes = rng() % 64; !got && probes > 0; --probes) {
              cpu_relax();
              got = sem.try_wait();
            }
            if (!got) {
              sem.wait();
              got = true;
            }
            break;
        }
        if (!got) continue;
        if (done.load(std::memory_order_acquire)) return;  // an exit signal
        consumed.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::minstd_rand rng(99);
  for (std::uint64_t released = 0; released < kSignals;) {
    auto n =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(1 + rng() % 3, kSignals - released));
    sem.release(n);
    released += n;
    if (rng() % 8 == 0) std::this_thread::yield();
  }
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (consumed.load() < kSignals) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "consumed " << consumed.load() << " of " << kSignals << ": a wakeup was lost";
    std::this_thread::yield();
  }
  EXPECT_EQ(consumed.load(), kSignals);
  done.store(true, std::memory_order_release);
  sem.release(kConsumers);
  for (auto& t : consumers)
    t.join();
  EXPECT_EQ(consumed.load(), kSignals) << "a signal was counted twice";
  auto c = sem.counts();
  EXPECT_EQ(c.waiters, 0);
  EXPECT_EQ(c.signaled_to_wake, 0);
  EXPECT_EQ(c.signals, 0u);
}

// Waits (yielding, bounded) until every waiter the last nudge() woke is back.
void await_nudged(LifoSemaphore& sem) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!sem.nudged()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a nudged waiter never came back";
    std::this_thread::yield();
  }
}

// nudge() (a paused test clock's, Scheduler::nudge_sleepers()) wakes every parked waiter once
// and gives none a signal: each parks again, and the counts are as before. It refuses a count
// that is not the number parked, and a second nudge while the first is out.
TEST(LifoSemaphore, ANudgeWakesEveryWaiterOnceAndEachParksAgain) {
  LifoSemaphore sem;
  constexpr int kThreads = 3;
  std::atomic<int> returned{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      sem.wait();
      returned.fetch_add(1);
    });
  await_waiters(sem, kThreads);
  EXPECT_FALSE(sem.nudge(kThreads - 1)) << "one more is parked than the caller counts";
  EXPECT_TRUE(sem.nudged()) << "a refused nudge wakes nobody";
  ASSERT_TRUE(sem.nudge(kThreads));
  await_nudged(sem);
  auto c = sem.counts();
  EXPECT_EQ(c.waiters, kThreads);
  EXPECT_EQ(c.signaled_to_wake, 0);
  EXPECT_EQ(c.signals, 0u);
  EXPECT_EQ(returned.load(), 0) << "a nudge is not a signal";
  // Parked again, on the stack: a release still finds each.
  sem.release(kThreads);
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(returned.load(), kThreads);
}

// A release while nudged waiters are still on their way back is not lost: it counts them as
// the ones to take its signal, and one of them does.
TEST(LifoSemaphore, AReleaseDuringANudgeIsTakenByANudgedWaiter) {
  LifoSemaphore sem;
  constexpr int kThreads = 3;
  std::atomic<int> returned{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      sem.wait();
      returned.fetch_add(1);
    });
  await_waiters(sem, kThreads);
  ASSERT_TRUE(sem.nudge(kThreads));
  sem.release(1);
  await_nudged(sem);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (returned.load() != 1) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the release was lost";
    std::this_thread::yield();
  }
  await_waiters(sem, kThreads - 1);
  sem.release(kThreads - 1);
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(returned.load(), kThreads);
  auto c = sem.counts();
  EXPECT_EQ(c.waiters, 0);
  EXPECT_EQ(c.signaled_to_wake, 0);
  EXPECT_EQ(c.signals, 0u);
}

// The random interleavings above with a thread nudging whoever is parked as often as it can:
// every signal is still consumed exactly once, and nobody sleeps through one.
TEST(LifoSemaphore, NudgesLoseNoWakeups) {
  LifoSemaphore sem;
  constexpr std::uint64_t kSignals = 50'000;
  constexpr int kConsumers = 4;
  std::atomic<std::uint64_t> consumed{0};
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> nudges{0};
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      std::minstd_rand rng(static_cast<unsigned>(c + 1));
      for (;;) {
        if (rng() % 2 == 0 || !sem.try_wait()) sem.wait();
        if (done.load(std::memory_order_acquire)) return;  // an exit signal
        consumed.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::thread nudger([&] {
    while (!done.load(std::memory_order_acquire)) {
      if (sem.nudge(sem.counts().waiters)) nudges.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::yield();
    }
  });
  std::minstd_rand rng(99);
  for (std::uint64_t released = 0; released < kSignals;) {
    auto n =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(1 + rng() % 3, kSignals - released));
    sem.release(n);
    released += n;
    if (rng() % 8 == 0) std::this_thread::yield();
  }
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (consumed.load() < kSignals) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "consumed " << consumed.load() << " of " << kSignals << ": a wakeup was lost";
    std::this_thread::yield();
  }
  EXPECT_EQ(consumed.load(), kSignals);
  done.store(true, std::memory_order_release);
  nudger.join();
  sem.release(kConsumers);
  for (auto& t : consumers)
    t.join();
  EXPECT_EQ(consumed.load(), kSignals) << "a signal was counted twice";
  EXPECT_GT(nudges.load(), 0u);
  auto c = sem.counts();
  EXPECT_EQ(c.waiters, 0);
  EXPECT_EQ(c.signaled_to_wake, 0);
  EXPECT_EQ(c.signals, 0u);
  EXPECT_TRUE(sem.nudged());
}

}  // namespace
}  // namespace arbor::sync
