// The scheduler with per_worker_parking and worker drivers attached (sched/worker_driver.hpp):
// every worker opens and closes its own driver on its own thread, sleeps in it, runs what it
// reaps itself, is woken in it by outside work, looks into it while busy; detach and stop end
// every wait. The parking protocol is sched/src/per_worker_parking.cpp's (model: worker_drivers.pml).
//
// FakeWorkerDriver stands in for an engine's ring: a test "completes" an item on a worker's
// driver as the kernel would post a CQE; a blocking wait sleeps on a futex word until unpark()
// or a completion; dispatch() submits what the last wait took, as an engine's event trees are.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "arbor/sched/blocking_region.hpp"
#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/test_hooks.hpp"
#include "arbor/sched/worker_driver.hpp"
#include "arbor/sync/futex.hpp"
#include "test_support.hpp"

namespace arbor::sched {
namespace {

#if !defined(__linux__)
// Per-worker parking serves io_uring's ring per worker and exists only on Linux (scheduler.cpp).
TEST(SchedulerWorkerDrivers, IsRefusedOffLinux) {
  EXPECT_THROW(Scheduler(SchedulerOptions{.workers = 1, .per_worker_parking = true}),
               std::invalid_argument);
}
#else

using test::Countdown;
using test::eventually;
using test::FnItem;
using test::wait_or_exit;

// An item that records where it ran and counts a Countdown down (run or dropped).
struct RecordingItem : WorkItem {
  RecordingItem() : WorkItem(&run) {}
  Countdown* done = nullptr;
  std::atomic<int> runs{0};
  std::atomic<std::thread::id> ran_on{};
  static void run(WorkItem* self, Disposition d) noexcept {
    auto* item = static_cast<RecordingItem*>(self);
    if (d == Disposition::run) {
      item->ran_on.store(std::this_thread::get_id());
      item->runs.fetch_add(1);
    }
    if (item->done != nullptr) item->done->count_down();
  }
};

class FakeWorkerDriver final : public WorkerDriver {
 public:
  FakeWorkerDriver(Scheduler& s, std::thread::id owner) : scheduler_(s), owner_(owner) {}

  bool wait(std::int64_t timeout_ns) noexcept override {
    EXPECT_EQ(std::this_thread::get_id(), owner_) << "wait() off its worker's thread";
    if (timeout_ns == 0) {
      polls_.fetch_add(1);
    } else {
      waits_.fetch_add(1);
      in_kernel_.store(true);
      // Sticky: an unpark() before the wait ends it at once, as an eventfd or ring message.
      while (word_.exchange(0) == 0 && ready_.load() == 0)
        sync::futex_wait(word_, 0, std::nullopt);
      in_kernel_.store(false);
    }
    std::lock_guard lock(mutex_);
    while (!completed_.empty()) {
      taken_.push_back(completed_.front());
      completed_.pop_front();
      ready_.fetch_sub(1);
    }
    return !taken_.empty();
  }

  void dispatch() noexcept override {
    EXPECT_EQ(std::this_thread::get_id(), owner_) << "dispatch() off its worker's thread";
    for (WorkItem* item : taken_)
      scheduler_.submit(*item, /*prefer_local=*/true);
    taken_.clear();
  }

  bool pending() const noexcept override { return ready_.load() != 0; }

  void unpark() noexcept override {
    unparks_.fetch_add(1);
    word_.store(1);
    sync::futex_wake_all(word_);
  }

  /// Makes `item` a completion of this worker's, waking it if it waits, as the kernel would.
  void complete(WorkItem& item) {
    {
      std::lock_guard lock(mutex_);
      completed_.push_back(&item);
    }
    ready_.fetch_add(1);
    word_.store(1);
    sync::futex_wake_all(word_);
  }

  bool in_kernel() const { return in_kernel_.load(); }
  int waits() const { return waits_.load(); }
  int polls() const { return polls_.load(); }
  int unparks() const { return unparks_.load(); }
  std::thread::id owner() const { return owner_; }

 private:
  Scheduler& scheduler_;
  const std::thread::id owner_;
  std::mutex mutex_;
  std::deque<WorkItem*> completed_;  // under mutex_
  std::atomic<int> ready_{0};        // completed_.size(), readable without the lock
  std::vector<WorkItem*> taken_;     // owner only
  sync::FutexWord word_{0};
  std::atomic<bool> in_kernel_{false};
  std::atomic<int> waits_{0}, polls_{0}, unparks_{0};
};

// Opens a FakeWorkerDriver per worker (none for the workers `without` names), once each; keeps
// them after close() so that tests can read them.
class FakeDrivers final : public WorkerDrivers {
 public:
  FakeDrivers(Scheduler& s, std::size_t slots, std::function<bool(std::size_t)> without = {})
      : scheduler_(s), without_(std::move(without)), drivers_(slots), open_(slots) {}

  WorkerDriver* open(std::size_t worker) noexcept override {
    if (on_open) on_open(worker);  // outside the lock: it may wait
    std::lock_guard lock(mutex_);
    EXPECT_LT(worker, drivers_.size());
    if (without_ && without_(worker)) return nullptr;
    EXPECT_FALSE(open_[worker]) << "worker " << worker << " opened twice";
    if (drivers_[worker] == nullptr)
      drivers_[worker] = std::make_unique<FakeWorkerDriver>(scheduler_, std::this_thread::get_id());
    EXPECT_EQ(drivers_[worker]->owner(), std::this_thread::get_id());
    open_[worker] = true;
    ++opens_;
    return drivers_[worker].get();
  }

  void close(std::size_t worker, WorkerDriver& driver) noexcept override {
    std::lock_guard lock(mutex_);
    EXPECT_EQ(&driver, drivers_[worker].get());
    EXPECT_EQ(drivers_[worker]->owner(), std::this_thread::get_id()) << "closed off its thread";
    EXPECT_TRUE(open_[worker]);
    open_[worker] = false;
    ++closes_;
    if (on_close) on_close(*drivers_[worker]);
  }

  FakeWorkerDriver* at(std::size_t worker) {
    std::lock_guard lock(mutex_);
    return drivers_[worker].get();
  }
  int opens() {
    std::lock_guard lock(mutex_);
    return opens_;
  }
  int closes() {
    std::lock_guard lock(mutex_);
    return closes_;
  }
  /// Every driver of the first `n` workers is open and waiting in the kernel.
  bool all_waiting(int n) {
    for (int i = 0; i < n; ++i) {
      FakeWorkerDriver* d = at(static_cast<std::size_t>(i));
      if (d == nullptr || !d->in_kernel()) return false;
    }
    return true;
  }

  std::function<void(FakeWorkerDriver&)> on_close;  // set before attaching; under the lock
  std::function<void(std::size_t)> on_open;         // set before attaching; not under the lock

 private:
  Scheduler& scheduler_;
  std::function<bool(std::size_t)> without_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<FakeWorkerDriver> > drivers_;
  std::vector<bool> open_;
  int opens_ = 0;
  int closes_ = 0;
};

SchedulerOptions per_worker(int workers, int spares = 0) {
  return SchedulerOptions{
      .workers = workers, .max_spare_workers = spares, .per_worker_parking = true};
}

// Catches: the wrong attach refused (a shared Driver on a per-worker scheduler would have two
// parking protocols at once; worker drivers without per-worker parking would never be opened).
TEST(SchedulerWorkerDrivers, EachSchedulerTakesOnlyItsKindOfDriver) {
  Scheduler shared(SchedulerOptions{.workers = 1});
  FakeDrivers for_shared(shared, 2);
  EXPECT_FALSE(shared.attach_worker_drivers(for_shared));
  EXPECT_FALSE(shared.per_worker_parking());
  Scheduler own(per_worker(1));
  EXPECT_TRUE(own.per_worker_parking());
  FakeDrivers drivers(own, 1);
  ASSERT_TRUE(own.attach_worker_drivers(drivers));
  EXPECT_FALSE(own.attach_worker_drivers(drivers)) << "attached twice";
  own.detach_worker_drivers();
  own.detach_worker_drivers();  // a second detach does nothing
  EXPECT_EQ(drivers.opens(), drivers.closes());
}

// Catches: a driver opened or closed off its worker's thread (an io_uring ring set up with
// SINGLE_ISSUER fails every submit from another thread), a sleeper never woken to open its
// driver, and a detach that returns while a worker still uses its driver.
TEST(SchedulerWorkerDrivers, EachWorkerOpensAndClosesItsDriverOnItsOwnThread) {
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(workers);
    Scheduler s(per_worker(workers));
    FakeDrivers drivers(s, static_cast<std::size_t>(workers));
    ASSERT_TRUE(s.attach_worker_drivers(drivers));
    ASSERT_TRUE(eventually([&] { return drivers.all_waiting(workers); }))
        << "not every worker waits in its own driver";
    EXPECT_EQ(drivers.opens(), workers);
    s.detach_worker_drivers();
    EXPECT_EQ(drivers.closes(), workers) << "detach returned before every worker closed";
    // Afterwards they park on their futexes, and outside work still wakes them.
    RecordingItem item;
    Countdown done(1);
    item.done = &done;
    ASSERT_TRUE(s.submit(item));
    wait_or_exit(done, "an outside submit after the drivers were detached");
    s.stop();
  }
}

// Catches: a completion run by some other worker than the one whose ring reaped it (the data
// would cross cores for nothing).
TEST(SchedulerWorkerDrivers, AnIdleWorkerRunsItsOwnCompletionItself) {
  constexpr int kWorkers = 2;
  Scheduler s(per_worker(kWorkers));
  FakeDrivers drivers(s, kWorkers);
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  for (int round = 0; round < 100; ++round) {
    ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); })) << round;
    FakeWorkerDriver& target = *drivers.at(static_cast<std::size_t>(round % kWorkers));
    RecordingItem item;
    Countdown done(1);
    item.done = &done;
    target.complete(item);
    wait_or_exit(done, "a completion for a sleeping worker");
    EXPECT_EQ(item.ran_on.load(), target.owner()) << "round " << round;
  }
  s.detach_worker_drivers();
  s.stop();
}

// Catches: a worker woken by its own IO counting itself in as a searcher, whose first item then
// wakes another worker for nothing (T2, "the last searcher found work"): a futex wake and a
// futile trip on every completion. See the top of per_worker_parking.cpp.
TEST(SchedulerWorkerDrivers, AWakeForOwnIoWakesNobodyElse) {
  constexpr int kWorkers = 2;
  Scheduler s(per_worker(kWorkers));
  FakeDrivers drivers(s, kWorkers);
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); }));
  const std::uint64_t wakes_before = s.counters().wakes;
  for (int round = 0; round < 100; ++round) {
    ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); })) << round;
    RecordingItem item;
    Countdown done(1);
    item.done = &done;
    drivers.at(static_cast<std::size_t>(round % kWorkers))->complete(item);
    wait_or_exit(done, "a completion for a sleeping worker");
  }
  EXPECT_EQ(s.counters().wakes, wakes_before) << "completions woke other workers";
  s.detach_worker_drivers();
  s.stop();
}

// Catches: an outside submit stranded while every worker sleeps in its own driver (the wake
// went to a parker nobody sleeps on, or to nobody).
TEST(SchedulerWorkerDrivers, AnOutsideSubmitWakesAWorkerWaitingInItsDriver) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    Scheduler s(per_worker(workers));
    FakeDrivers drivers(s, static_cast<std::size_t>(workers));
    ASSERT_TRUE(s.attach_worker_drivers(drivers));
    for (int round = 0; round < 200; ++round) {
      ASSERT_TRUE(eventually([&] {
        return drivers.all_waiting(workers) && s.parked_workers() == workers;
      })) << "round "
          << round;
      RecordingItem item;
      Countdown done(1);
      item.done = &done;
      ASSERT_TRUE(s.submit(item));
      wait_or_exit(done, "an outside submit while every worker waits in its driver");
    }
    int unparks = 0;
    for (int i = 0; i < workers; ++i)
      unparks += drivers.at(static_cast<std::size_t>(i))->unparks();
    EXPECT_GE(unparks, 200) << "the items ran, yet no driver was unparked for them?";
    s.detach_worker_drivers();
    s.stop();
  }
}

// Catches: a busy worker that never looks into its driver, so that its completion waits for it
// to run out of work (here: for ever, as the chain of items ends only once it has run).
TEST(SchedulerWorkerDrivers, ABusyWorkerLooksIntoItsDriver) {
  Scheduler s(per_worker(1));
  FakeDrivers drivers(s, 1);
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return drivers.all_waiting(1); }));
  RecordingItem completion;
  Countdown completion_done(1);
  completion.done = &completion_done;
  constexpr int kCap = 1'000'000;
  std::atomic<int> chain{0};
  Countdown chain_done(1);
  FnItem link([&](Disposition d) {
    if (d == Disposition::run && completion.runs.load() == 0 && chain.fetch_add(1) < kCap) {
      s.submit(link, /*prefer_local=*/true);
      return;
    }
    chain_done.count_down();
  });
  ASSERT_TRUE(s.submit(link));
  ASSERT_TRUE(eventually([&] { return chain.load() > 10; }));
  drivers.at(0)->complete(completion);  // the worker is busy: nobody waits in the kernel
  wait_or_exit(completion_done, "a completion for a busy worker");
  wait_or_exit(chain_done, "the chain");
  EXPECT_LT(chain.load(), kCap) << "the completion waited for the chain to end";
  EXPECT_GE(drivers.at(0)->polls(), 1);
  s.detach_worker_drivers();
  s.stop();
}

// Catches: stop() leaving a worker asleep in its driver (the join hangs), or a worker exiting
// without closing its driver on its own thread.
TEST(SchedulerWorkerDrivers, StopWhileEveryWorkerWaitsInItsDriver) {
  for (int workers : {1, 3}) {
    SCOPED_TRACE(workers);
    Scheduler s(per_worker(workers));
    FakeDrivers drivers(s, static_cast<std::size_t>(workers));
    ASSERT_TRUE(s.attach_worker_drivers(drivers));
    ASSERT_TRUE(eventually([&] { return drivers.all_waiting(workers); }));
    s.stop();
    EXPECT_EQ(drivers.closes(), workers);
    s.detach_worker_drivers();  // nothing left to wait for
  }
}

// Catches: a detach that returns while a worker running a long item still holds its driver
// (the engine would free a ring its owner goes back to).
TEST(SchedulerWorkerDrivers, DetachWaitsForAWorkerRunningALongItem) {
  constexpr int kWorkers = 2;
  Scheduler s(per_worker(kWorkers));
  FakeDrivers drivers(s, kWorkers);
  std::atomic<bool> release{false};
  std::atomic<bool> item_ended{false};
  std::atomic<std::thread::id> long_runner{};
  std::atomic<bool> closed_before_end{false};
  drivers.on_close = [&](FakeWorkerDriver& d) {
    if (d.owner() == long_runner.load() && !item_ended.load()) closed_before_end.store(true);
  };
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); }));
  Countdown started(1);
  FnItem long_item([&](Disposition) {
    long_runner.store(std::this_thread::get_id());
    started.count_down();
    while (!release.load())
      std::this_thread::yield();
    item_ended.store(true);
  });
  ASSERT_TRUE(s.submit(long_item));
  wait_or_exit(started, "the long item");
  std::atomic<bool> detached{false};
  std::thread detacher([&] {
    s.detach_worker_drivers();
    detached.store(true);
  });
  // The idle worker closes at once; the busy one only after its item.
  ASSERT_TRUE(eventually([&] { return drivers.closes() == 1; }));
  EXPECT_FALSE(detached.load()) << "detach returned with a driver still open";
  release.store(true);
  detacher.join();
  EXPECT_EQ(drivers.closes(), kWorkers);
  EXPECT_FALSE(closed_before_end.load());
  s.stop();
}

// Catches: lost wakeups in the per-worker protocol: outside submits, local spawns and
// completions racing workers on their way to sleep (some with drivers, some on futexes; the
// Dekker pair of S2/P2, the claim under the lock). Every round must finish; a lost wake hangs
// it and wait_or_exit fails the test.
TEST(SchedulerWorkerDrivers, ParkRacesNeverStrandWork) {
  for (int workers : {2, 4}) {
    for (bool half_without : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << workers << " workers, half without drivers " << half_without);
      Scheduler s(per_worker(workers));
      FakeDrivers drivers(s, static_cast<std::size_t>(workers),
                          [half_without](std::size_t i) { return half_without && i % 2 == 1; });
      ASSERT_TRUE(s.attach_worker_drivers(drivers));
      const int with_drivers = half_without ? (workers + 1) / 2 : workers;
      ASSERT_TRUE(eventually([&] { return drivers.opens() == with_drivers; }));
      constexpr int kRounds = 3000;
      for (int round = 0; round < kRounds; ++round) {
        Countdown done(3);
        FnItem child([&](Disposition) { done.count_down(); });
        FnItem parent([&](Disposition d) {
          if (d == Disposition::run) s.submit(child, /*prefer_local=*/true);
          done.count_down();
        });
        RecordingItem completion;
        completion.done = &done;
        ASSERT_TRUE(s.submit(parent));
        drivers.at(0)->complete(completion);
        wait_or_exit(done, "a round of submits, spawns and completions");
      }
      s.detach_worker_drivers();
      s.stop();
    }
  }
}

// Catches: a spare worker (started for a blocking region) with no parker of its own, or one
// that the sleeper stack cannot hold.
TEST(SchedulerWorkerDrivers, ASpareStartedForABlockingRegionParksAndWakesToo) {
  Scheduler s(per_worker(1, /*spares=*/1));
  FakeDrivers drivers(s, 2, [](std::size_t i) { return i >= 1; });  // spares: futex only
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  std::atomic<bool> release{false};
  Countdown blocked(1), other_done(1), blocker_done(1);
  FnItem blocker([&](Disposition d) {
    if (d == Disposition::run) {
      BlockingRegion region;
      blocked.count_down();
      while (!release.load())
        std::this_thread::yield();
    }
    blocker_done.count_down();
  });
  FnItem other([&](Disposition) { other_done.count_down(); });
  ASSERT_TRUE(s.submit(blocker));
  wait_or_exit(blocked, "the blocking item");
  ASSERT_TRUE(s.submit(other));  // the one worker is blocked: only a spare can run it
  wait_or_exit(other_done, "work beside a blocking region");
  EXPECT_EQ(s.counters().spare_workers, 1u);
  release.store(true);
  wait_or_exit(blocker_done, "the blocking item's end");
  // Both asleep now (the spare on its futex): outside work still wakes one of them.
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == 2; }));
  Countdown last(1);
  FnItem after([&](Disposition) { last.count_down(); });
  ASSERT_TRUE(s.submit(after));
  wait_or_exit(last, "an outside submit with a spare asleep");
  s.detach_worker_drivers();
  s.stop();
}

// The item in a BlockingRegion below looks for the fake driver its worker opened.
FakeWorkerDriver* own_driver(FakeDrivers& drivers, std::size_t slots) {
  for (std::size_t i = 0; i < slots; ++i)
    if (drivers.at(i) != nullptr && drivers.at(i)->owner() == std::this_thread::get_id())
      return drivers.at(i);
  return nullptr;
}

// Catches: completions already reaped-able when a worker enters a BlockingRegion left in its
// driver, where nobody else can reap them (a ring per worker has one issuer), so that an item
// blocking on IO it queued on its own ring deadlocks. Found by review. Entering the region
// looks into the worker's own driver and hands what it finds to everyone.
TEST(SchedulerWorkerDrivers, ACompletionReadyWhenAWorkerEntersABlockingRegionRunsElsewhere) {
  constexpr int kWorkers = 2;
  Scheduler s(per_worker(kWorkers, /*spares=*/1));
  FakeDrivers drivers(s, kWorkers + 1);
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); }));
  RecordingItem completion;
  Countdown completion_done(1);
  completion.done = &completion_done;
  std::atomic<bool> ran_during_region{false};
  std::atomic<std::thread::id> blocked_on{};
  Countdown blocker_done(1);
  FnItem blocker([&](Disposition d) {
    if (d == Disposition::run) {
      blocked_on.store(std::this_thread::get_id());
      FakeWorkerDriver* own = own_driver(drivers, kWorkers + 1);
      EXPECT_NE(own, nullptr);
      if (own != nullptr) own->complete(completion);  // IO it queued on its own ring completes
      BlockingRegion region;  // ... and then it blocks until that IO has been handled
      ran_during_region.store(completion_done.wait(std::chrono::seconds(20)));
    }
    blocker_done.count_down();
  });
  ASSERT_TRUE(s.submit(blocker));
  wait_or_exit(blocker_done, "the blocking item");
  EXPECT_TRUE(ran_during_region.load()) << "the completion waited for the region to end";
  EXPECT_NE(completion.ran_on.load(), blocked_on.load());
  s.detach_worker_drivers();
  s.stop();
}

// What a driver cannot hand over (blocking_region.hpp; this fake's before_blocking() moves
// nothing, like a ring with no other ring to move to): IO that completes on a blocked worker's
// own driver *during* the region waits for the region's end, as it waits for a long item's.
// Catches: such a completion lost rather than late.
TEST(SchedulerWorkerDrivers, ACompletionArrivingDuringABlockingRegionRunsAfterIt) {
  constexpr int kWorkers = 2;
  Scheduler s(per_worker(kWorkers, /*spares=*/1));
  FakeDrivers drivers(s, kWorkers + 1);
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); }));
  RecordingItem completion;
  Countdown completion_done(1);
  completion.done = &completion_done;
  Countdown blocker_done(1);
  FnItem blocker([&](Disposition d) {
    if (d == Disposition::run) {
      FakeWorkerDriver* own = own_driver(drivers, kWorkers + 1);
      EXPECT_NE(own, nullptr);
      BlockingRegion region;
      if (own != nullptr) own->complete(completion);
    }
    blocker_done.count_down();
  });
  ASSERT_TRUE(s.submit(blocker));
  wait_or_exit(blocker_done, "the blocking item");
  wait_or_exit(completion_done, "the completion after the region");
  EXPECT_EQ(completion.runs.load(), 1);
  s.detach_worker_drivers();
  s.stop();
}

// right after their futex wait, so the counts the test reads are the wakers' alone.
namespace overwake {
std::atomic<int> arrived{0};
std::atomic<bool> hold_woken{true};
std::atomic<int> woken{0};
thread_local bool submitter = false;
void before_claim() {
  if (!submitter) return;
  arrived.fetch_add(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
}
void after_wake() {
  woken.fetch_add(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (hold_woken.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
}
}  // namespace overwake

TEST(SchedulerWorkerDrivers, TwoConcurrentNotifiesWakeOneSearcher) {
  constexpr int kWorkers = 3;
  Scheduler s(per_worker(kWorkers));  // no drivers: every worker parks on its futex
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == kWorkers; }));
  overwake::arrived.store(0);
  overwake::woken.store(0);
  overwake::hold_woken.store(true);
  test_hooks::set_before_sleeper_claim(&overwake::before_claim);
  test_hooks::set_after_park_wake(&overwake::after_wake);
  Countdown done(2);
  FnItem a([&](Disposition) { done.count_down(); });
  FnItem b([&](Disposition) { done.count_down(); });
  std::thread ta([&] {
    overwake::submitter = true;
    s.submit(a);
  });
  std::thread tb([&] {
    overwake::submitter = true;
    s.submit(b);
  });
  ta.join();
  tb.join();
  const int parked = s.parked_workers();
  test_hooks::set_before_sleeper_claim(nullptr);
  overwake::hold_woken.store(false);
  wait_or_exit(done, "the two submits");
  test_hooks::set_after_park_wake(nullptr);
  EXPECT_EQ(overwake::arrived.load(), 2) << "the race was not set up";
  EXPECT_EQ(parked, kWorkers - 1) << "two concurrent notifies each claimed a sleeper";
  s.stop();
}

// Review (review-pw): attach_worker_drivers() is allowed on a worker, but it waits for
// attach_mutex_, which detach_worker_drivers() holds while it waits for every worker to close
// its driver; a worker that attaches (or merely tries: a second attach only returns false)
// while a detach waits for it never ends its item, so neither call returns. Here the item's
// attach must return within the bound; the deadlock ends the test (wait_or_exit).
TEST(SchedulerWorkerDrivers, AnAttachFromAWorkerDuringADetachDoesNotDeadlock) {
  constexpr int kWorkers = 2;
  Scheduler s(per_worker(kWorkers));
  FakeDrivers drivers(s, kWorkers);
  FakeDrivers others(s, kWorkers);
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); }));
  Countdown started(1), attached(1);
  std::atomic<bool> detaching{false};
  FnItem item([&](Disposition d) {
    if (d == Disposition::run) {
      started.count_down();
      // The detach has claimed the sleepers and waits for our driver: the idle worker closed.
      EXPECT_TRUE(eventually([&] { return detaching.load() && drivers.closes() == 1; }));
      (void)s.attach_worker_drivers(others);  // false (a detach is under way) or true: either
    }
    attached.count_down();
  });
  ASSERT_TRUE(s.submit(item));
  wait_or_exit(started, "the item");
  std::thread detacher([&] {
    detaching.store(true);
    s.detach_worker_drivers();
  });
  wait_or_exit(attached, "an attach from a worker while a detach waits for that worker",
               std::chrono::seconds(10));
  detacher.join();
  s.detach_worker_drivers();  // whatever the item's attach did
  s.stop();
}

// Review (review-pw): stop() while a worker is inside open(): it must still exit (it sees
// stopping_ at its loop's top or at P2), closing what it opened; the others sleep in theirs.
TEST(SchedulerWorkerDrivers, StopWhileAWorkerIsInsideOpen) {
  constexpr int kWorkers = 3;
  Scheduler s(per_worker(kWorkers));
  FakeDrivers drivers(s, kWorkers);
  std::atomic<bool> in_open{false}, let_go{false};
  drivers.on_open = [&](std::size_t worker) {
    if (worker != 0) return;
    in_open.store(true);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!let_go.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  };
  ASSERT_TRUE(s.attach_worker_drivers(drivers));
  ASSERT_TRUE(eventually([&] { return in_open.load() && drivers.opens() == kWorkers - 1; }));
  Countdown stopped(1);
  std::thread stopper([&] {
    s.stop();
    stopped.count_down();
  });
  let_go.store(true);
  wait_or_exit(stopped, "stop() while a worker is inside open()");
  stopper.join();
  EXPECT_EQ(drivers.opens(), kWorkers);
  EXPECT_EQ(drivers.closes(), kWorkers) << "a worker exited without closing its driver";
  s.detach_worker_drivers();
}

// Review (review-pw): a detach or stop() while a worker is between R0 (on the stack) and P2
// (held by the inside_park hook, after P1): the detach's or stop's pass claims it and unparks
// its driver before its wait; it must see the claim (or the epoch, or stopping_), close its
// driver and let the call return.
namespace between_r0_and_p2 {
std::atomic<int> held{0};
std::atomic<bool> let_go{false};
void hold() {
  if (held.fetch_add(1) != 0) return;  // only the first parker after the hook is set
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!let_go.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
}
}  // namespace between_r0_and_p2

TEST(SchedulerWorkerDrivers, DetachOrStopWhileAWorkerIsBetweenItsPushAndP2) {
  for (bool use_stop : {false, true}) {
    SCOPED_TRACE(use_stop ? "stop" : "detach");
    constexpr int kWorkers = 2;
    Scheduler s(per_worker(kWorkers));
    FakeDrivers drivers(s, kWorkers);
    ASSERT_TRUE(s.attach_worker_drivers(drivers));
    ASSERT_TRUE(eventually([&] { return drivers.all_waiting(kWorkers); }));
    between_r0_and_p2::held.store(0);
    between_r0_and_p2::let_go.store(false);
    test_hooks::set_inside_park(&between_r0_and_p2::hold);
    Countdown ran(1);
    FnItem item([&](Disposition) { ran.count_down(); });
    ASSERT_TRUE(s.submit(item));
    wait_or_exit(ran, "the item");
    ASSERT_TRUE(eventually([&] { return between_r0_and_p2::held.load() >= 1; }));
    Countdown finished(1);
    std::thread caller([&] {
      if (use_stop) {
        s.stop();
      } else {
        s.detach_worker_drivers();
      }
      finished.count_down();
    });
    // The other worker sleeps in its driver: it closes at once, the held one only once let go.
    ASSERT_TRUE(eventually([&] { return drivers.closes() >= 1; }));
    EXPECT_EQ(drivers.closes(), 1) << "the held worker closed its driver while held";
    between_r0_and_p2::let_go.store(true);
    wait_or_exit(finished, use_stop ? "stop() with a worker between R0 and P2"
                                    : "a detach with a worker between R0 and P2");
    caller.join();
    test_hooks::set_inside_park(nullptr);
    EXPECT_EQ(drivers.closes(), kWorkers);
    if (!use_stop) {
      Countdown after(1);
      FnItem more([&](Disposition) { after.count_down(); });
      ASSERT_TRUE(s.submit(more));
      wait_or_exit(after, "a submit after the detach");
    }
    s.stop();
    s.detach_worker_drivers();
  }
}

// Catches: a detach from one of the workers, which would wait for its own driver to close.
TEST(SchedulerWorkerDrivers, DetachFromAWorkerAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Scheduler s(per_worker(1));
        FakeDrivers drivers(s, 1);
        if (!s.attach_worker_drivers(drivers)) std::exit(0);
        Countdown never(1);
        FnItem detach([&](Disposition) { s.detach_worker_drivers(); });
        s.submit(detach);
        never.wait(std::chrono::seconds(20));
      },
      "detach_worker_drivers\\(\\) called from one of its own workers");
}

#endif  // __linux__

}  // namespace
}  // namespace arbor::sched
