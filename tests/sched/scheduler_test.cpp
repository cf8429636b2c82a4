#include "arbor/sched/scheduler.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using test::eventually;
using test::FnItem;

TEST(Scheduler, RejectsNonPositiveWorkerCounts) {
  for (int n : {0, -1, -100}) {
    try {
      Scheduler s(SchedulerOptions{.workers = n});
      ADD_FAILURE() << "constructed with " << n << " workers";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("workers"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Scheduler(SchedulerOptions{.workers = 1, .max_spare_workers = -1}),
               std::invalid_argument);
}

TEST(Scheduler, DefaultsToTheAvailableCpus) {
  Scheduler s;
  EXPECT_EQ(s.workers(), static_cast<int>(sync::available_cpus()));
}

TEST(Scheduler, RunsASubmittedItemOnAWorker) {
  Scheduler s(SchedulerOptions{.workers = 2});
  Countdown done(1);
  Scheduler* seen = nullptr;
  FnItem item([&](Disposition d) {
    EXPECT_EQ(d, Disposition::run);
    seen = Scheduler::current();
    done.count_down();
  });
  ASSERT_TRUE(s.submit(item));
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(seen, &s);
  EXPECT_EQ(Scheduler::current(), nullptr);
}

// Several external producers and every worker (fanning out from inside items) submit 10^6 items
// in all; each must run exactly once.
struct CountingItem : WorkItem {
  CountingItem() : WorkItem(&run) {}
  static void run(WorkItem* self, Disposition d) noexcept {
    auto* c = static_cast<CountingItem*>(self);
    if (d == Disposition::run) {
      c->runs.fetch_add(1, std::memory_order_relaxed);
      // Fan-out: the first item of each group of 4 submits the next three locally.
      for (CountingItem* child : c->children)
        if (child != nullptr) Scheduler::current()->submit(*child, /*prefer_local=*/true);
    }
    c->done->count_down();
  }
  std::atomic<int> runs{0};
  CountingItem* children[3] = {nullptr, nullptr, nullptr};
  Countdown* done = nullptr;
};

TEST(Scheduler, MillionItemsFromProducersAndWorkersRunExactlyOnce) {
  constexpr int kItems = 1'000'000;
  constexpr int kProducers = 3;
  Scheduler s(SchedulerOptions{.workers = 2});
  Countdown done(kItems);
  auto items = std::make_unique<CountingItem[]>(kItems);
  for (int i = 0; i < kItems; ++i) {
    items[i].done = &done;
    if (i % 4 == 0)
      for (int k = 1; k < 4 && i + k < kItems; ++k)
        items[i].children[k - 1] = &items[i + k];
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = p * 4; i < kItems; i += 4 * kProducers)
        ASSERT_TRUE(s.submit(items[i]));
    });
  for (auto& t : producers)
    t.join();
  ASSERT_TRUE(done.wait(std::chrono::seconds(120))) << done.left() << " items never ran";
  int wrong = 0;
  for (int i = 0; i < kItems; ++i)
    wrong += items[i].runs.load() != 1;
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(s.stop(), 0u);
  auto c = s.counters();
  EXPECT_EQ(c.submitted, static_cast<std::uint64_t>(kItems));
  EXPECT_EQ(c.run, static_cast<std::uint64_t>(kItems));
  EXPECT_EQ(c.queued(), 0u);
}

TEST(Scheduler, PreferLocalFromAWorkerRunsOnTheSameWorkerWhenOthersAreBusy) {
  Scheduler s(SchedulerOptions{.workers = 1});
  Countdown done(1);
  std::thread::id parent_thread, child_thread;
  FnItem child([&](Disposition) {
    child_thread = std::this_thread::get_id();
    done.count_down();
  });
  FnItem parent([&](Disposition) {
    parent_thread = std::this_thread::get_id();
    Scheduler::current()->submit(child, true);
  });
  s.submit(parent);
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(parent_thread, child_thread);
}

TEST(Scheduler, IdleWorkersParkAndWakeForNewWork) {
  Scheduler s(SchedulerOptions{.workers = 2});
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == 2; })) << "idle workers did not park";
  Countdown done(1);
  FnItem item([&](Disposition) { done.count_down(); });
  s.submit(item);
  ASSERT_TRUE(done.wait());
  auto c = s.counters();
  EXPECT_GE(c.parks, 2u);
  EXPECT_GE(c.wakes, 1u);
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == 2; }));
}

TEST(Scheduler, StopWithWorkInFlightRunsOrDropsEveryItem) {
  constexpr int kItems = 20'000;
  std::vector<std::atomic<int>> runs(kItems), drops(kItems);
  std::vector<std::unique_ptr<FnItem>> items;
  for (int i = 0; i < kItems; ++i)
    items.push_back(std::make_unique<FnItem>([&, i](Disposition d) {
      if (d == Disposition::run) {
        runs[static_cast<std::size_t>(i)].fetch_add(1);
        for (int k = 0; k < 200; ++k)
          sync::cpu_relax();
      } else {
        drops[static_cast<std::size_t>(i)].fetch_add(1);
      }
    }));
  Scheduler s(SchedulerOptions{.workers = 2});
  std::atomic<bool> stop_now{false};
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      if (i == kItems / 4) stop_now.store(true);
      s.submit(*items[static_cast<std::size_t>(i)]);  // after stop(): dropped at once
    }
  });
  while (!stop_now.load())
    std::this_thread::yield();
  std::uint64_t dropped_queued = s.stop();
  producer.join();
  int wrong = 0, dropped = 0;
  for (int i = 0; i < kItems; ++i) {
    wrong += runs[static_cast<std::size_t>(i)] + drops[static_cast<std::size_t>(i)] != 1;
    dropped += drops[static_cast<std::size_t>(i)];
  }
  EXPECT_EQ(wrong, 0) << "an item was neither run nor dropped, or both";
  EXPECT_GE(static_cast<std::uint64_t>(dropped), dropped_queued);
  auto c = s.counters();
  EXPECT_EQ(c.queued(), 0u);
  EXPECT_EQ(c.run + c.dropped, c.submitted);
}

TEST(Scheduler, SubmitAfterStopDropsAtOnce) {
  Scheduler s(SchedulerOptions{.workers = 1});
  s.stop();
  int drops = 0;
  FnItem item([&](Disposition d) { drops += d == Disposition::drop; });
  EXPECT_FALSE(s.submit(item));
  EXPECT_EQ(drops, 1);
  EXPECT_EQ(s.stop(), 0u) << "stop() is idempotent";
}

TEST(Scheduler, LocalOverflowSpillsToTheGlobalQueue) {
  // One worker, a local queue of 4, and an item that submits 100 locally: nothing may be lost.
  Scheduler s(SchedulerOptions{.workers = 1, .local_queue_capacity = 4});
  constexpr int kChildren = 100;
  Countdown done(kChildren);
  std::vector<std::unique_ptr<FnItem>> children;
  for (int i = 0; i < kChildren; ++i)
    children.push_back(std::make_unique<FnItem>([&](Disposition) { done.count_down(); }));
  FnItem parent([&](Disposition) {
    for (auto& c : children)
      Scheduler::current()->submit(*c, true);
  });
  s.submit(parent);
  ASSERT_TRUE(done.wait());
}

TEST(Scheduler, WorkersStealFromABusyWorker) {
  // One item fans 64 children into its local queue and then keeps its worker busy until the
  // children have all run: they can only have run by being stolen.
  Scheduler s(SchedulerOptions{.workers = 2});
  constexpr int kChildren = 64;
  Countdown done(kChildren);
  std::vector<std::unique_ptr<FnItem>> children;
  for (int i = 0; i < kChildren; ++i)
    children.push_back(std::make_unique<FnItem>([&](Disposition) { done.count_down(); }));
  bool all_ran_while_parent_busy = false;
  Countdown parent_done(1);
  FnItem parent([&](Disposition) {
    for (auto& c : children)
      Scheduler::current()->submit(*c, true);
    all_ran_while_parent_busy = done.wait();
    parent_done.count_down();
  });
  s.submit(parent);
  ASSERT_TRUE(parent_done.wait());
  EXPECT_TRUE(all_ran_while_parent_busy);
  EXPECT_GE(s.counters().steals, 1u);
}

// The wake deferral lets at most one item wait for the item that queued it: a running item that
// queues two items and then keeps its worker busy must get a helper, even when every other
// worker is already asleep. Without the bound this test hangs (ctest timeout).
TEST(Scheduler, SecondQueuedItemWakesASleeperWhileItsParentRuns) {
  for (bool prefer_local : {true, false}) {
    Scheduler s(SchedulerOptions{.workers = 2});
    Countdown children_done(2), parent_done(1);
    FnItem a([&](Disposition) { children_done.count_down(); });
    FnItem b([&](Disposition) { children_done.count_down(); });
    bool children_ran_while_parent_busy = false;
    FnItem parent([&](Disposition) {
      // Start from "everyone else asleep", so no searcher can save the day by chance.
      EXPECT_TRUE(eventually([&] { return s.parked_workers() == 1; }));
      Scheduler::current()->submit(a, prefer_local);
      Scheduler::current()->submit(b, prefer_local);
      children_ran_while_parent_busy = children_done.wait();
      parent_done.count_down();
    });
    s.submit(parent);
    ASSERT_TRUE(parent_done.wait());
    s.stop();
    EXPECT_TRUE(children_ran_while_parent_busy) << "prefer_local=" << prefer_local;
  }
}

// nudge_sleepers() (a paused test clock's, before it jumps) is refused while a worker is
// counted awake, and on an idle scheduler wakes the semaphore's sleepers without counting them
// awake: each comes back to sleep (sleepers_nudged()), and a later item still wakes one.
TEST(SchedulerNudge, RefusedWhileAWorkerRunsAndTheNudgedComeBackAsleep) {
  Scheduler s(SchedulerOptions{.workers = 3});
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == 3; }));
  std::atomic<bool> release{false};
  Countdown started(1), done(2);
  FnItem blocker([&](Disposition) {
    started.count_down();
    while (!release.load()) std::this_thread::yield();
    done.count_down();
  });
  ASSERT_TRUE(s.submit(blocker));
  ASSERT_TRUE(started.wait());
  EXPECT_FALSE(s.nudge_sleepers()) << "nudged while a worker runs an item";
  release.store(true);
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == 3 && s.idle(); }));
  ASSERT_TRUE(eventually([&] { return s.nudge_sleepers(); }));
  ASSERT_TRUE(eventually([&] { return s.sleepers_nudged(); }));
  EXPECT_EQ(s.parked_workers(), 3);
  FnItem item([&](Disposition) { done.count_down(); });
  ASSERT_TRUE(s.submit(item));
  ASSERT_TRUE(done.wait());
}

// Items submitted in bursts from outside (so the workers park between them) while another
// thread nudges the sleepers as often as it can: every item runs exactly once, none waits for
// a wake that a nudge swallowed, and the workers end asleep with nothing nudged outstanding.
TEST(SchedulerNudge, NudgingInALoopLosesNoWork) {
  constexpr int kItems = 40'000;
  constexpr int kBurst = 64;
  Scheduler s(SchedulerOptions{.workers = 4});
  Countdown done(kItems);
  auto items = std::make_unique<CountingItem[]>(kItems);
  for (int i = 0; i < kItems; ++i)
    items[i].done = &done;
  std::atomic<bool> stop_nudging{false};
  std::atomic<std::uint64_t> nudges{0};
  std::thread nudger([&] {
    while (!stop_nudging.load(std::memory_order_acquire)) {
      if (s.nudge_sleepers()) nudges.fetch_add(1, std::memory_order_relaxed);
      s.sleepers_nudged();
      std::this_thread::yield();
    }
  });
  for (int i = 0; i < kItems; ++i) {
    ASSERT_TRUE(s.submit(items[i]));
    if (i % kBurst == kBurst - 1) {
      // Let the workers drain and park, so that nudges find sleepers.
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
  }
  ASSERT_TRUE(done.wait(std::chrono::seconds(60))) << done.left() << " items never ran";
  stop_nudging.store(true, std::memory_order_release);
  nudger.join();
  int wrong = 0;
  for (int i = 0; i < kItems; ++i)
    wrong += items[i].runs.load() != 1;
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(nudges.load(), 0u);
  ASSERT_TRUE(eventually([&] { return s.sleepers_nudged(); }));
  ASSERT_TRUE(eventually([&] { return s.parked_workers() == 4; }));
  EXPECT_EQ(s.stop(), 0u);
  EXPECT_EQ(s.counters().run, static_cast<std::uint64_t>(kItems));
}

}  // namespace
}  // namespace arbor::sched
