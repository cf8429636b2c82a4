// The scheduler with a Driver attached (sched/driver.hpp): an idle worker waits in the driver,
// anyone can wake it, busy workers look into it, and detaching or stopping ends a wait.
//
// FakeDriver stands in for an IO engine: "completions" are a count the test raises; a blocking
// wait sleeps on a futex word until unpark() or a completion, and dispatch() turns what the last
// wait took into work items, submitted as an engine's event trees are.
#include "arbor/sched/driver.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/test_hooks.hpp"
#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using test::eventually;
using test::FnItem;
using test::wait_or_exit;

// An item that counts a Countdown down when it runs (or is dropped).
struct CountingItem : WorkItem {
  CountingItem() : WorkItem(&run) {}
  Countdown* done = nullptr;
  std::atomic<int> runs{0};
  std::atomic<int> drops{0};
  static void run(WorkItem* self, Disposition d) noexcept {
    auto* item = static_cast<CountingItem*>(self);
    (d == Disposition::run ? item->runs : item->drops).fetch_add(1);
    if (item->done != nullptr) item->done->count_down();
  }
};

class FakeDriver final : public Driver {
 public:
  explicit FakeDriver(Scheduler& s, std::size_t items) : scheduler_(s), items_(items) {}

  void wait(std::int64_t timeout_ns) noexcept override {
    EXPECT_FALSE(inside_.exchange(true)) << "two threads inside the driver at once";
    if (timeout_ns == 0) {
      polls_.fetch_add(1);
    } else {
      waits_.fetch_add(1);
      in_kernel_.store(true);
      // Sticky: an unpark() before the wait ends it at once, as an eventfd would.
      while (word_.exchange(0) == 0 && completions_.load() == 0)
        sync::futex_wait(word_, 0, std::nullopt);
      in_kernel_.store(false);
    }
    taken_ = completions_.exchange(0);
    inside_.store(false);
  }

  void dispatch() noexcept override {
    EXPECT_FALSE(inside_.exchange(true)) << "two threads inside the driver at once";
    while (taken_ > 0) {
      --taken_;
      const std::size_t i = next_item_.fetch_add(1);
      if (i < items_.size()) scheduler_.submit(*items_[i], /*prefer_local=*/true);
    }
    inside_.store(false);
  }

  void unpark() noexcept override {
    unparks_.fetch_add(1);
    word_.store(1);
    sync::futex_wake_all(word_);
  }

  /// Makes `n` completions ready and wakes a waiting holder, as the kernel would.
  void complete(std::uint32_t n) {
    completions_.fetch_add(n);
    word_.store(1);
    sync::futex_wake_all(word_);
  }

  void add(CountingItem& item) { items_.push_back(&item); }
  bool in_kernel() const { return in_kernel_.load(); }
  int waits() const { return waits_.load(); }
  int polls() const { return polls_.load(); }
  int unparks() const { return unparks_.load(); }

 private:
  Scheduler& scheduler_;
  std::vector<CountingItem*> items_;
  std::atomic<std::size_t> next_item_{0};
  std::atomic<std::uint32_t> completions_{0};
  std::uint32_t taken_ = 0;  // holder only
  sync::FutexWord word_{0};
  std::atomic<bool> inside_{false};
  std::atomic<bool> in_kernel_{false};
  std::atomic<int> waits_{0}, polls_{0}, unparks_{0};
};

// Catches: attaching a driver while every worker sleeps on the semaphore leaving nobody to
// wait in it (completions would then never be reaped).
TEST(SchedulerDriver, AnIdleWorkerWaitsInTheDriverAndRunsWhatItReaps) {
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(workers);
    Scheduler s(SchedulerOptions{.workers = workers});
    FakeDriver driver(s, 0);
    CountingItem item;
    Countdown done(1);
    item.done = &done;
    driver.add(item);
    ASSERT_TRUE(s.attach_driver(driver));
    ASSERT_TRUE(eventually([&] { return driver.in_kernel(); })) << "nobody waits in the driver";
    driver.complete(1);
    wait_or_exit(done, "the reaped completion");
    EXPECT_EQ(item.runs.load(), 1);
    s.detach_driver();
    EXPECT_GE(s.counters().driver_waits, 1u);
    s.stop();
  }
}

// Catches: a submit from outside the pool stranded while the only idle worker waits in the
// driver with no deadline (the wake went to the semaphore, where nobody sleeps).
TEST(SchedulerDriver, AnOutsideSubmitWakesTheWorkerWaitingInTheDriver) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    Scheduler s(SchedulerOptions{.workers = workers});
    FakeDriver driver(s, 0);
    ASSERT_TRUE(s.attach_driver(driver));
    constexpr int kRounds = 200;
    for (int r = 0; r < kRounds; ++r) {
      // Every worker asleep, one of them in the driver: the submit must reach that one.
      ASSERT_TRUE(eventually([&] { return driver.in_kernel() && s.parked_workers() == workers; }))
          << "round " << r;
      CountingItem item;
      Countdown done(1);
      item.done = &done;
      ASSERT_TRUE(s.submit(item));
      wait_or_exit(done, "an outside submit while a worker waits in the driver");
    }
    EXPECT_GE(driver.unparks(), 1) << "the driver was never unparked, yet the items ran?";
    s.detach_driver();
    s.stop();
  }
}

// Catches: busy workers never looking into the driver, so that a completion that arrives while
// nobody waits in it waits until some worker runs out of work (here: forever, as the items
// only stop once the completion has run).
TEST(SchedulerDriver, BusyWorkersPollTheDriver) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    Scheduler s(SchedulerOptions{.workers = workers});
    FakeDriver driver(s, 0);
    CountingItem reaped;
    Countdown reaped_done(1);
    reaped.done = &reaped_done;
    driver.add(reaped);
    ASSERT_TRUE(s.attach_driver(driver));
    // One self-resubmitting item per worker keeps every worker busy until `reaped` has run.
    struct Busy : WorkItem {
      Busy() : WorkItem(&run) {}
      CountingItem* until = nullptr;
      Countdown* stopped = nullptr;
      std::atomic<bool> started{false};
      static void run(WorkItem* self, Disposition d) noexcept {
        auto* b = static_cast<Busy*>(self);
        b->started.store(true);
        if (d == Disposition::run && b->until->runs.load() == 0) {
          Scheduler::current()->submit(*b, /*prefer_local=*/true);
          return;
        }
        b->stopped->count_down();
      }
    };
    std::vector<Busy> busy(static_cast<std::size_t>(workers));
    Countdown stopped(static_cast<std::uint32_t>(workers));
    for (auto& b : busy) {
      b.until = &reaped;
      b.stopped = &stopped;
      ASSERT_TRUE(s.submit(b));
    }
    // Every worker busy, nobody in the driver: only a busy worker's look can find it.
    ASSERT_TRUE(eventually([&] {
      for (const auto& b : busy)
        if (!b.started.load()) return false;
      return !driver.in_kernel();
    })) << "the busy items did not occupy every worker";
    driver.complete(1);
    wait_or_exit(reaped_done, "a completion while every worker is busy");
    wait_or_exit(stopped, "the busy items");
    EXPECT_GE(driver.polls(), 1);
    s.detach_driver();
    EXPECT_GE(s.counters().driver_polls, 1u);
    s.stop();
  }
}

// Catches: detach_driver() or stop() returning while a worker is still inside the driver
// (the driver is destroyed right after: a use after free), or never returning because the
// waiting worker is never unparked.
TEST(SchedulerDriver, DetachAndStopEndAWaitInTheDriver) {
  for (int round = 0; round < 50; ++round) {
    auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 2});
    auto driver = std::make_unique<FakeDriver>(*s, 0);
    ASSERT_TRUE(s->attach_driver(*driver));
    ASSERT_TRUE(eventually([&] { return driver->in_kernel(); }));
    if (round % 2 == 0) {
      s->detach_driver();
      EXPECT_FALSE(driver->in_kernel());
      driver.reset();  // nobody may touch it now
      s->stop();
    } else {
      s->stop();  // with the driver still attached: stop ends the wait too
      EXPECT_FALSE(driver->in_kernel());
      s->detach_driver();
      driver.reset();
    }
  }
}

// Catches: a second driver silently replacing the first (workers would then wait in one while
// the other's owner thinks it is attached), or ending the process.
TEST(SchedulerDriver, ASecondDriverIsRefused) {
  Scheduler s(SchedulerOptions{.workers = 1});
  FakeDriver first(s, 0), second(s, 0);
  ASSERT_TRUE(s.attach_driver(first));
  EXPECT_FALSE(s.attach_driver(second));
  ASSERT_TRUE(eventually([&] { return first.in_kernel(); }));
  EXPECT_EQ(second.waits(), 0);
  s.detach_driver();
  EXPECT_TRUE(s.attach_driver(second));  // free again after a detach
  s.detach_driver();
  s.stop();
}

// Catches: a worker that parks on the semaphore because the right is taken staying asleep
// after the holder leaves with work, so that nobody waits in the driver while the holder runs a
// long item: completions then wait for that item to end (here: forever, as it ends only once
// the second completion has run).
TEST(SchedulerDriver, ReleasingTheRightHandsTheKernelOver) {
  Scheduler s(SchedulerOptions{.workers = 2});
  FakeDriver driver(s, 0);
  struct Long : CountingItem {
    CountingItem* until = nullptr;
    std::atomic<bool> started{false};
    Long() { fn = &run_long; }
    static void run_long(WorkItem* self, Disposition d) noexcept {
      auto* item = static_cast<Long*>(self);
      item->started.store(true);
      if (d == Disposition::run)
        while (item->until->runs.load() == 0)
          std::this_thread::yield();
      run(self, d);
    }
  };
  Long first;
  CountingItem second;
  Countdown done(2);
  first.done = second.done = &done;
  first.until = &second;
  driver.add(first);
  driver.add(second);
  ASSERT_TRUE(s.attach_driver(driver));
  // One worker in the driver, the other asleep on the semaphore (it found the right taken).
  ASSERT_TRUE(eventually([&] { return driver.in_kernel() && s.parked_workers() == 2; }));
  driver.complete(1);  // the holder reaps `first` and runs it until `second` has run
  ASSERT_TRUE(eventually([&] { return first.started.load(); }));
  ASSERT_TRUE(eventually([&] { return driver.in_kernel(); }))
      << "nobody took the driver over while its last holder runs a long item";
  driver.complete(1);
  wait_or_exit(done, "a completion while the other worker runs a long item");
  s.detach_driver();
  s.stop();
}

// Catches: submits racing with workers that go to sleep in the driver or on the semaphore
// leaving an item stranded (a lost wake-up between S3's choice and the sleeper's D1/P1).
TEST(SchedulerDriver, OutsideSubmitsRacingWithParkingStrandNothing) {
  for (int workers : {1, 2, 3}) {
    SCOPED_TRACE(workers);
    Scheduler s(SchedulerOptions{.workers = workers});
    FakeDriver driver(s, 0);
    ASSERT_TRUE(s.attach_driver(driver));
    constexpr int kItems = 20000;
    std::vector<CountingItem> items(kItems);
    Countdown done(kItems);
    std::vector<std::thread> producers;
    for (int p = 0; p < 2; ++p)
      producers.emplace_back([&, p] {
        for (int i = p; i < kItems; i += 2) {
          items[static_cast<std::size_t>(i)].done = &done;
          s.submit(items[static_cast<std::size_t>(i)]);
          if (i % 64 == 0) std::this_thread::yield();  // let the workers go to sleep now and then
        }
      });
    for (auto& t : producers)
      t.join();
    wait_or_exit(done, "items submitted while workers park in the driver");
    for (const auto& item : items)
      EXPECT_EQ(item.runs.load(), 1);
    s.detach_driver();
    s.stop();
  }
}

// Catches: completions reaped by the driver while other workers sleep on the semaphore not
// spreading (the reaper wakes nobody for a surplus), or being run twice.
TEST(SchedulerDriver, ReapedBurstsRunExactlyOnce) {
  Scheduler s(SchedulerOptions{.workers = 3});
  constexpr int kItems = 3000;
  FakeDriver driver(s, 0);
  std::vector<CountingItem> items(kItems);
  Countdown done(kItems);
  for (auto& item : items) {
    item.done = &done;
    driver.add(item);
  }
  ASSERT_TRUE(s.attach_driver(driver));
  for (int sent = 0; sent < kItems; sent += 30)
    driver.complete(30);
  wait_or_exit(done, "reaped bursts");
  for (const auto& item : items)
    EXPECT_EQ(item.runs.load(), 1);
  s.detach_driver();
  s.stop();
}

// A driver that reaps nothing, whose first `held` looks without waiting (wait(0)) each wait at
// a gate until the test opens it (gates open in order of arrival); a blocking wait sleeps until
// unpark().
class GatedDriver final : public Driver {
 public:
  explicit GatedDriver(int held) : held_(held) {}

  void wait(std::int64_t timeout_ns) noexcept override {
    if (timeout_ns == 0) {
      const int n = looks_.fetch_add(1) + 1;
      while (n <= held_ && opened_.load() < n)
        std::this_thread::yield();
      return;
    }
    in_kernel_.store(true);
    while (word_.exchange(0) == 0)
      sync::futex_wait(word_, 0, std::nullopt);
    in_kernel_.store(false);
  }
  void dispatch() noexcept override {}
  void unpark() noexcept override {
    word_.store(1);
    sync::futex_wake_all(word_);
  }

  void open(int gate) { opened_.store(gate); }
  int looks() const { return looks_.load(); }
  bool in_kernel() const { return in_kernel_.load(); }

 private:
  const int held_;
  std::atomic<int> looks_{0}, opened_{0};
  std::atomic<bool> in_kernel_{false};
  sync::FutexWord word_{0};
};

// The hooks of the release races below. Each `hold` state: 0 armed, 1 the first thread to reach
// the hook is held there, 2 let go (later threads pass).
namespace release_race {
std::atomic<int> counting{0};  // a parker, before P1
std::atomic<int> unwoken{0};   // a release whose handover woke nobody
std::atomic<int> woke{0};      // a release whose handover woke a sleeper, after its wake
std::atomic<int> woken{0};     // a worker just woken from P4
std::atomic<int> sleeping{0};  // parkers that reached P4 (a count, nobody held)
void reset() {
  for (auto* state : {&counting, &unwoken, &woke, &woken, &sleeping})
    state->store(0);
}
void hold(std::atomic<int>& state) {
  int armed = 0;
  if (!state.compare_exchange_strong(armed, 1)) return;
  while (state.load() != 2)
    std::this_thread::yield();
}
void hold_counting() {
  hold(counting);
}
void hold_unwoken() {
  hold(unwoken);
}
void hold_woke() {
  hold(woke);
}
void hold_woken() {
  hold(woken);
}
void note_sleeping() {
  sleeping.fetch_add(1);
}
// An item's body that waits for `flag` (a long item, until the test ends it).
void until(const std::atomic<bool>& flag) {
  while (!flag.load())
    std::this_thread::yield();
}
}  // namespace release_race

// Two releases of the poll right race with a worker going to sleep, so that nobody would wait
// in the kernel while one worker sleeps and the two others run long items: the interleaving
// the model found (sched/model/park_notify.pml) for the old protocol of wishes, forced with
// test hooks. Items b and c look into the driver (poll_driver()) and then run on; worker A runs
// out of work while b's worker B holds the right and is held before P1. B releases; its
// handover declines, since A still counts as awake (searching), and B is held there. c's worker
// C takes the right and is held in its look. A goes on: P1, the right still taken (by C) at P2,
// nothing queued: it sleeps. C releases, then B goes on, and both run long items. C's release
// must wake A, which parks into the driver. (The old protocol lost A's wish between the two
// releases: B had taken it, to store it back after its wake declined.)
TEST(SchedulerDriver, TwoRacingReleasesLeaveSomeoneInTheKernel) {
  SchedulerOptions o{.workers = 3};
  o.spin = sync::SpinConfig{.mode = sync::SpinConfig::Mode::none};
  Scheduler s(o);
  GatedDriver driver(/*held=*/2);
  std::atomic<bool> go_b{false}, go_c{false}, z_ends{false}, ends{false};
  std::atomic<int> started{0}, looked{0};
  Countdown done(3);
  auto looker = [&](std::atomic<bool>& go) {
    return [&, go = &go](Disposition d) {
      if (d == Disposition::run) {
        started.fetch_add(1);
        release_race::until(*go);
        Scheduler::current()->poll_driver();
        looked.fetch_add(1);
        release_race::until(ends);  // a long item
      }
      done.count_down();
    };
  };
  FnItem b(looker(go_b)), c(looker(go_c));
  FnItem z([&](Disposition d) {
    if (d == Disposition::run) {
      started.fetch_add(1);
      release_race::until(z_ends);
    }
    done.count_down();
  });
  release_race::reset();
  ASSERT_TRUE(s.submit(b));
  ASSERT_TRUE(s.submit(c));
  ASSERT_TRUE(s.submit(z));
  ASSERT_TRUE(eventually([&] { return started.load() == 3; })) << "the items did not all start";
  ASSERT_TRUE(s.attach_driver(driver));  // everyone runs an item: nobody is in the driver
  go_b = true;
  ASSERT_TRUE(eventually([&] { return driver.looks() == 1; })) << "b did not take the right";
  test_hooks::set_before_park_count(&release_race::hold_counting);
  test_hooks::set_release_unwoken(&release_race::hold_unwoken);
  test_hooks::set_before_park_sleep(&release_race::note_sleeping);
  z_ends = true;  // A runs out of work while B holds the right
  ASSERT_TRUE(eventually([&] { return release_race::counting.load() == 1; })) << "A did not park";
  driver.open(1);  // B's release: its handover declines (A searches)
  ASSERT_TRUE(eventually([&] { return release_race::unwoken.load() == 1; }))
      << "B's release woke someone";
  go_c = true;
  ASSERT_TRUE(eventually([&] { return driver.looks() == 2; })) << "c did not take the right";
  release_race::counting = 2;  // A: P1, the right taken (by C) at P2, nothing queued: P4
  ASSERT_TRUE(eventually([&] { return release_race::sleeping.load() == 1; })) << "A did not sleep";
  driver.open(2);  // C's release: A is asleep, nobody searches: wakes it
  ASSERT_TRUE(eventually([&] { return looked.load() == 1; }));
  release_race::unwoken = 2;  // b and c run on
  ASSERT_TRUE(eventually([&] { return looked.load() == 2; }));
  const bool watched = eventually([&] { return driver.in_kernel(); }, std::chrono::seconds(2));
  test_hooks::set_before_park_count(nullptr);
  test_hooks::set_release_unwoken(nullptr);
  test_hooks::set_before_park_sleep(nullptr);
  ends = true;
  wait_or_exit(done, "the long items");
  s.detach_driver();
  s.stop();
  EXPECT_TRUE(watched) << "nobody waits in the driver while one worker sleeps and two run long "
                          "items (the second release did not hand the kernel over)";
}

// A worker parks while a release's handover has just woken another: the next release must see
// it. Under the old protocol of wishes, the first release's clear erased the second wish, so
// the second parker slept on the semaphore while the woken worker, which found an item instead
// of parking, and the releaser ran long items with nobody in the driver. Worker A parks while B
// holds the right and sleeps. B releases: its handover wakes A, and B is held after it. A runs
// y, whose look takes the right (held). C runs out of work: the right is A's; it is held
// before P1. B runs on; C sleeps (the right is still A's). A's release must wake C, which then
// parks into the driver.
TEST(SchedulerDriver, AParkDuringAReleasesWakeIsSeenByTheNextRelease) {
  SchedulerOptions o{.workers = 3};
  o.spin = sync::SpinConfig{.mode = sync::SpinConfig::Mode::none};
  Scheduler s(o);
  GatedDriver driver(/*held=*/2);
  std::atomic<bool> go_b{false}, z_ends{false}, c_ends{false}, ends{false};
  std::atomic<int> started{0}, looked{0};
  Countdown done(4);
  FnItem b([&](Disposition d) {
    if (d == Disposition::run) {
      started.fetch_add(1);
      release_race::until(go_b);
      Scheduler::current()->poll_driver();
      looked.fetch_add(1);
      release_race::until(ends);  // a long item
    }
    done.count_down();
  });
  FnItem y([&](Disposition d) {
    if (d == Disposition::run) {
      Scheduler::current()->poll_driver();
      looked.fetch_add(1);
      release_race::until(ends);  // a long item
    }
    done.count_down();
  });
  auto until_then_end = [&](std::atomic<bool>& flag) {
    return [&, flag = &flag](Disposition d) {
      if (d == Disposition::run) {
        started.fetch_add(1);
        release_race::until(*flag);
      }
      done.count_down();
    };
  };
  FnItem z(until_then_end(z_ends)), c(until_then_end(c_ends));
  release_race::reset();
  ASSERT_TRUE(s.submit(b));
  ASSERT_TRUE(s.submit(c));
  ASSERT_TRUE(s.submit(z));
  ASSERT_TRUE(eventually([&] { return started.load() == 3; })) << "the items did not all start";
  ASSERT_TRUE(s.attach_driver(driver));  // everyone runs an item: nobody is in the driver
  go_b = true;
  ASSERT_TRUE(eventually([&] { return driver.looks() == 1; })) << "b did not take the right";
  test_hooks::set_before_park_sleep(&release_race::note_sleeping);
  test_hooks::set_after_park_wake(&release_race::hold_woken);
  test_hooks::set_release_woke(&release_race::hold_woke);
  z_ends = true;  // A runs out of work while B holds the right, and sleeps
  ASSERT_TRUE(eventually([&] { return release_race::sleeping.load() == 1; })) << "A did not sleep";
  driver.open(1);  // B's release: its handover wakes A; B is held after it
  ASSERT_TRUE(eventually([&] { return release_race::woke.load() == 1; }))
      << "B's release woke nobody";
  ASSERT_TRUE(eventually([&] { return release_race::woken.load() == 1; })) << "A was not woken";
  ASSERT_TRUE(s.submit(y));  // A counts as searching: no wake
  release_race::woken = 2;   // A runs y, whose look takes the right
  ASSERT_TRUE(eventually([&] { return driver.looks() == 2; })) << "y did not take the right";
  test_hooks::set_before_park_count(&release_race::hold_counting);
  c_ends = true;  // C runs out of work while A holds the right
  ASSERT_TRUE(eventually([&] { return release_race::counting.load() == 1; })) << "C did not park";
  release_race::woke = 2;  // B runs on
  ASSERT_TRUE(eventually([&] { return looked.load() == 1; }));
  release_race::counting = 2;  // C: P1, the right taken (by A) at P2, nothing queued: P4
  ASSERT_TRUE(eventually([&] { return release_race::sleeping.load() == 2; })) << "C did not sleep";
  driver.open(2);  // A's release: C is asleep, nobody searches: wakes it
  ASSERT_TRUE(eventually([&] { return looked.load() == 2; }));
  const bool watched = eventually([&] { return driver.in_kernel(); }, std::chrono::seconds(2));
  test_hooks::set_before_park_sleep(nullptr);
  test_hooks::set_after_park_wake(nullptr);
  test_hooks::set_release_woke(nullptr);
  test_hooks::set_before_park_count(nullptr);
  ends = true;
  wait_or_exit(done, "the long items");
  s.detach_driver();
  s.stop();
  EXPECT_TRUE(watched) << "nobody waits in the driver while one worker sleeps and two run long "
                          "items (the next release did not hand the kernel over)";
}

// An unpark with nothing reaped (what an engine's wake does when a running item queues a request
// while a worker sleeps in the kernel: io_uring's Ring::flush) must not cost a second worker's
// wake. The reaper goes on to run nothing; if it counts itself back in not searching, its
// release's handover (S3) wakes a semaphore sleeper, which then searches, finds nothing and
// parks again: one futex wake and a spin per such unpark, on every request a busy worker sends
// while the others are idle. Counted in as a searcher (as a claimed driver sleeper is), the
// reaper covers the handover itself: it parks back into the driver, or finds work and, as the
// last searcher, wakes a sleeper at T2.
namespace empty_reap {
std::atomic<int> woke{0};
void count_woke() {
  woke.fetch_add(1);
}
}  // namespace empty_reap

TEST(SchedulerDriver, AnUnparkWithNothingReapedWakesNobodyElse) {
  for (int workers : {2, 3, 4}) {
    SCOPED_TRACE(workers);
    SchedulerOptions o{.workers = workers};
    o.spin = sync::SpinConfig{.mode = sync::SpinConfig::Mode::none};
    Scheduler s(o);
    FakeDriver driver(s, 0);
    ASSERT_TRUE(s.attach_driver(driver));
    auto quiet = [&] { return driver.in_kernel() && s.parked_workers() == workers; };
    ASSERT_TRUE(eventually(quiet)) << "one worker in the driver, the others on the semaphore";
    empty_reap::woke = 0;
    test_hooks::set_release_woke(&empty_reap::count_woke);
    constexpr int kRounds = 20;
    for (int r = 0; r < kRounds; ++r) {
      const int waits = driver.waits();
      driver.unpark();  // as an engine's wake: the holder returns with nothing
      ASSERT_TRUE(eventually([&] { return driver.waits() > waits && quiet(); })) << "round " << r;
    }
    test_hooks::set_release_woke(nullptr);
    EXPECT_EQ(empty_reap::woke.load(), 0)
        << "releases after an empty reap woke a sleeper (" << kRounds << " unparks)";
    s.detach_driver();
    s.stop();
  }
}

}  // namespace
}  // namespace arbor::sched
