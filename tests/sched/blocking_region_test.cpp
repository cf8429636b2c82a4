#include "arbor/sched/blocking_region.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using test::FnItem;

// Every worker blocks inside a BlockingRegion; queued work must still run (on a spare or a
// woken worker) before the blocked items are released.
TEST(BlockingRegion, QueuedWorkRunsWhileEveryWorkerBlocks) {
  Scheduler s(SchedulerOptions{.workers = 2});
  Countdown gate(1), both_blocked(2);
  std::vector<std::unique_ptr<FnItem>> blockers;
  for (int i = 0; i < 2; ++i)
    blockers.push_back(std::make_unique<FnItem>([&](Disposition) {
      BlockingRegion region;
      both_blocked.count_down();
      gate.wait();
    }));
  for (auto& b : blockers)
    s.submit(*b);
  ASSERT_TRUE(both_blocked.wait());

  constexpr int kItems = 1000;
  Countdown done(kItems);
  std::vector<std::unique_ptr<FnItem>> items;
  for (int i = 0; i < kItems; ++i)
    items.push_back(std::make_unique<FnItem>([&](Disposition) { done.count_down(); }));
  for (auto& item : items)
    s.submit(*item);
  EXPECT_TRUE(done.wait()) << done.left() << " items stalled behind blocked workers";
  EXPECT_GE(s.counters().spare_workers, 1u);
  gate.count_down();
  s.stop();  // the blockers are still returning; they must finish before their items die
}

TEST(BlockingRegion, HandsTheLocalQueueToOthers) {
  // One worker queues work locally and then blocks: the local items must not wait for it.
  Scheduler s(SchedulerOptions{.workers = 2});
  constexpr int kChildren = 10;
  Countdown children_done(kChildren), gate(1), parent_done(1);
  std::vector<std::unique_ptr<FnItem>> children;
  for (int i = 0; i < kChildren; ++i)
    children.push_back(std::make_unique<FnItem>([&](Disposition) { children_done.count_down(); }));
  bool children_ran_while_blocked = false;
  FnItem parent([&](Disposition) {
    for (auto& c : children)
      Scheduler::current()->submit(*c, true);
    BlockingRegion region;
    children_ran_while_blocked = children_done.wait();
    parent_done.count_down();
  });
  s.submit(parent);
  ASSERT_TRUE(parent_done.wait());
  s.stop();
  EXPECT_TRUE(children_ran_while_blocked);
}

TEST(BlockingRegion, IsANoOpOffTheWorkers) {
  BlockingRegion region;  // must neither crash nor need a scheduler
  SUCCEED();
}

}  // namespace
}  // namespace arbor::sched
