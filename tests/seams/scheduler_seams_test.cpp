// Seams of the scheduler: refused submits, stop() against blocking regions and against itself,
// and the park/notify handshake under the race that once left a phantom searcher.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/sched/blocking_region.hpp"
#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/test_hooks.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using test::FnItem;

// Catches: an item refused during shutdown being dropped twice, or queued after all.
TEST(SchedulerSeams, SubmitAfterStopDropsExactlyOnce) {
  Scheduler s(SchedulerOptions{.workers = 2});
  s.stop();
  std::atomic<int> runs{0}, drops{0};
  FnItem item([&](Disposition d) { (d == Disposition::run ? runs : drops).fetch_add(1); });
  EXPECT_FALSE(s.submit(item));
  EXPECT_EQ(drops.load(), 1);
  FnItem a([&](Disposition d) { (d == Disposition::run ? runs : drops).fetch_add(1); });
  FnItem b([&](Disposition d) { (d == Disposition::run ? runs : drops).fetch_add(1); });
  a.next = &b;
  EXPECT_FALSE(s.submit_batch(&a, &b, 2, 2));
  EXPECT_EQ(drops.load(), 3);
  EXPECT_EQ(runs.load(), 0);
}

// Catches: stop() holding the lifecycle lock while it joins a worker that, entering a blocking
// region with every worker busy, waits for that lock to start a spare (deadlock).
TEST(SchedulerSeams, StopReturnsWhileAWorkerEntersABlockingRegion) {
  Scheduler s(SchedulerOptions{.workers = 1, .max_spare_workers = 1});
  Countdown started(1);
  std::atomic<bool> entered{false};
  FnItem item([&](Disposition d) {
    if (d != Disposition::run) return;
    started.count_down();
    while (!s.stopping())
      std::this_thread::yield();  // stop() has begun and holds its locks
    BlockingRegion blocking;      // all workers busy: tries to start a spare
    entered = true;
  });
  ASSERT_TRUE(s.submit(item));
  ASSERT_TRUE(started.wait());
  Countdown stopped(1);
  std::thread stopper([&] {
    s.stop();
    stopped.count_down();
  });
  test::wait_or_exit(stopped, "Scheduler::stop()");
  stopper.join();
  EXPECT_TRUE(entered.load());
}

// Catches: a second stop() returning before the first has joined the workers (its caller could
// then destroy the scheduler under them).
TEST(SchedulerSeams, EveryConcurrentStopWaitsForTheJoin) {
  Scheduler s(SchedulerOptions{.workers = 2});
  Countdown started(1);
  std::atomic<bool> second_stopping{false}, item_done{false};
  FnItem item([&](Disposition d) {
    if (d != Disposition::run) return;
    started.count_down();
    while (!second_stopping.load())
      std::this_thread::yield();
    item_done = true;
  });
  ASSERT_TRUE(s.submit(item));
  ASSERT_TRUE(started.wait());
  std::thread first([&] { s.stop(); });
  while (!s.stopping())
    std::this_thread::yield();
  second_stopping = true;
  s.stop();
  EXPECT_TRUE(item_done.load());  // the worker running it was joined before we returned
  first.join();
}

// Catches: an item queued from inside a BlockingRegion waiting for the region to end, because a
// running item's first queued item defers its wake to the item's end ("this worker runs it
// next"), which is false while the worker blocks; the other worker stayed parked.
TEST(SchedulerSeams, ItemQueuedInsideABlockingRegionRunsWhileTheWorkerBlocks) {
  SchedulerOptions o{.workers = 2, .max_spare_workers = 0};
  o.spin = sync::SpinConfig{.mode = sync::SpinConfig::Mode::none};
  Scheduler s(o);
  std::atomic<bool> ran{false};
  FnItem y([&](Disposition d) {
    if (d == Disposition::run) ran = true;
  });
  bool other_parked = false, ran_while_blocked = false;
  Countdown done(1);
  FnItem x([&](Disposition d) {
    if (d == Disposition::run) {
      BlockingRegion blocking;  // wakes the other worker; it finds nothing and parks again
      other_parked = test::eventually([&] { return s.parked_workers() == 1; });
      Scheduler::current()->submit(y);  // e.g. rt.spawn() from a task that blocks
      ran_while_blocked = test::eventually([&] { return ran.load(); }, std::chrono::seconds(5));
    }
    done.count_down();
  });
  ASSERT_TRUE(s.submit(x));
  ASSERT_TRUE(done.wait());
  s.stop();
  EXPECT_TRUE(other_parked) << "the other worker never parked";
  EXPECT_TRUE(ran_while_blocked) << "an item queued inside a BlockingRegion waited 5 s";
}

// Holds the first worker that reaches it inside park(), between P1 and P2, until released.
namespace held_in_park {
std::atomic<int> state{0};  // 0 armed, 1 a worker is held, 2 released
void hold() {
  int armed = 0;
  if (!state.compare_exchange_strong(armed, 1)) return;
  while (state.load() != 2)
    std::this_thread::yield();
}
}  // namespace held_in_park

// Catches the phantom searcher, deterministically: worker B is held inside park() after it left
// the unparked count; the busy worker A queues an item, and its notify counts a wake for B (the
// only sleeper); then B's re-check finds that item. The old protocol re-joined B as "unparked,
// not searching", so the counted wake became a searcher nobody was, filling the searcher cap
// (one of two workers): B then looped park/re-check forever without stealing, and A's items
// waited behind A. Now B takes the wake counted for it and searches.
TEST(SchedulerSeams, ParkerThatFindsWorkTakesTheWakeCountedForIt) {
  SchedulerOptions o{.workers = 2};
  o.spin = sync::SpinConfig{.mode = sync::SpinConfig::Mode::none};
  Scheduler s(o);
  std::atomic<int> taken{0};
  FnItem z1([&](Disposition) { taken.fetch_add(1); });
  FnItem z2([&](Disposition) { taken.fetch_add(1); });
  FnItem y([&](Disposition) { taken.fetch_add(1); });
  bool held = false, stranded = false;
  Countdown done(1);
  FnItem busy([&](Disposition d) {
    if (d == Disposition::run) {
      held_in_park::state = 0;
      test_hooks::set_inside_park(&held_in_park::hold);
      Scheduler::current()->submit(z1, /*prefer_local=*/true);
      Scheduler::current()->submit(z2, /*prefer_local=*/true);  // wakes B if it sleeps
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (held_in_park::state.load() != 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      held = held_in_park::state.load() == 1;
      Scheduler::current()->submit(y, /*prefer_local=*/true);  // its notify counts B asleep
      held_in_park::state = 2;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (taken.load() < 3 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      stranded = taken.load() < 3;
      test_hooks::set_inside_park(nullptr);
    }
    done.count_down();
  });
  ASSERT_TRUE(s.submit(busy));
  ASSERT_TRUE(done.wait());
  s.stop();
  EXPECT_TRUE(held) << "no worker reached park() within 10 s";
  EXPECT_FALSE(stranded) << "items stayed behind the busy worker for 5 s (phantom searcher)";
}

// The same handshake without holding anyone: a stress test of the fences TSan cannot see.
// Catches the phantom searcher: a worker whose park re-check finds work while a submitter
// counts a wake for it re-joined as "unparked, not searching", so the counted wake held the
// searcher cap (1 of 2 workers) with nobody behind it, and the idle worker looped park/re-check
// without ever stealing the items queued behind a busy worker. Here one long item queues items
// one at a time behind itself and waits for the other worker to take each; the other worker
// parks between items, so every queued item's wake races its way into park(). A stranded item
// (not taken within 5 s) fails the test. A running item's first queued item wakes nobody until
// the item ends (by design: its worker usually runs it next), so a primer goes first and every
// counted item after it is a surplus that notifies at once.
TEST(SchedulerSeams, ParkRaceNeverStrandsStealableWork) {
  for (auto mode : {sync::SpinConfig::Mode::none, sync::SpinConfig::Mode::adaptive}) {
    SchedulerOptions o{.workers = 2};
    o.spin = sync::SpinConfig{.mode = mode};
    Scheduler s(o);
    constexpr int kItems = 20'000;
    std::atomic<int> taken{0};
    int stranded_at = -1;
    std::vector<std::unique_ptr<FnItem>> items;
    for (int i = 0; i < kItems; ++i)
      items.push_back(std::make_unique<FnItem>([&](Disposition) { taken.fetch_add(1); }));
    FnItem primer([](Disposition) {});
    Countdown done(1);
    FnItem busy([&](Disposition d) {
      if (d == Disposition::run) {
        Scheduler::current()->submit(primer, /*prefer_local=*/true);  // defers the first wake
        for (int i = 0; i < kItems && stranded_at < 0; ++i) {
          Scheduler::current()->submit(*items[static_cast<std::size_t>(i)], /*prefer_local=*/true);
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (taken.load() <= i)
            if (std::chrono::steady_clock::now() > deadline) {
              stranded_at = i;
              break;
            }
        }
      }
      done.count_down();
    });
    ASSERT_TRUE(s.submit(busy));
    ASSERT_TRUE(done.wait());
    s.stop();
    EXPECT_EQ(stranded_at, -1) << "spin mode " << static_cast<int>(mode) << ": item " << stranded_at
                               << " stayed behind a busy worker for 5 s";
  }
}

}  // namespace
}  // namespace arbor::sched
