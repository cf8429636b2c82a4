// Batch pops from the global queue (src/global_batch.hpp): the batch's size, its order, what
// happens when the local queue is nearly full, and the scheduler around it (fairness, stop).
#include "global_batch.hpp"  // private to sched: tested from its source tree

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "arbor/sched/scheduler.hpp"
#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using test::FnItem;

void noop(WorkItem*, Disposition) noexcept {}

std::size_t index_of(const std::vector<WorkItem>& items, const WorkItem* item) {
  return static_cast<std::size_t>(item - items.data());
}

TEST(GlobalQueue, PopBatchTakesTheOldestInOrderAndCountsThem) {
  GlobalQueue q;
  std::vector<WorkItem> items(10, WorkItem(&noop));
  for (auto& i : items)
    q.push(&i);
  std::size_t count = 99;
  EXPECT_EQ(q.pop_batch(0, count), nullptr);
  EXPECT_EQ(count, 0u);
  WorkItem* chain = q.pop_batch(4, count);
  ASSERT_EQ(count, 4u);
  std::size_t expected = 0;
  for (WorkItem* i = chain; i != nullptr; i = i->next)
    EXPECT_EQ(index_of(items, i), expected++);
  EXPECT_EQ(expected, 4u) << "the chain ends after the batch";
  EXPECT_EQ(q.size(), 6u);
  EXPECT_EQ(q.pops(), 4u);
  chain = q.pop_batch(100, count);  // more than queued: all of it
  ASSERT_EQ(count, 6u);
  for (WorkItem* i = chain; i != nullptr; i = i->next)
    EXPECT_EQ(index_of(items, i), expected++);
  EXPECT_EQ(expected, 10u);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pops(), 10u);
  EXPECT_EQ(q.pop_batch(4, count), nullptr);
  EXPECT_EQ(count, 0u);
  // The queue still works after being emptied by a batch (its tail was reset).
  q.push(&items[3]);
  EXPECT_EQ(q.pop(), &items[3]);
}

TEST(LocalQueue, PushBatchPopsInChainOrderAndThievesTakeTheOtherEnd) {
  LocalQueue q(8);
  std::vector<WorkItem> items(5, WorkItem(&noop));
  for (std::size_t i = 0; i + 1 < items.size(); ++i)
    items[i].next = &items[i + 1];
  ASSERT_TRUE(q.push_batch(&items[0], 5));
  EXPECT_EQ(q.size_estimate(), 5u);
  EXPECT_EQ(q.steal(), &items[4]) << "thieves take the batch's far end";
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(q.pop(), &items[i]);
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(LocalQueue, PushBatchTakesNothingWithoutRoomForAll) {
  LocalQueue q(8);
  std::vector<WorkItem> items(9, WorkItem(&noop));
  for (std::size_t i = 0; i < 6; ++i)
    ASSERT_TRUE(q.push(&items[i]));
  items[6].next = &items[7];
  items[7].next = &items[8];
  EXPECT_FALSE(q.push_batch(&items[6], 3)) << "room for 2 only";
  EXPECT_EQ(q.size_estimate(), 6u);
  EXPECT_TRUE(q.push_batch(&items[6], 2));
  EXPECT_EQ(q.size_estimate(), 8u);
  EXPECT_EQ(q.pop(), &items[6]) << "in chain order";
  EXPECT_EQ(q.pop(), &items[7]);
  EXPECT_EQ(q.pop(), &items[5]);
}

TEST(GlobalBatch, SizeIsTheFairShareBoundedByHalfTheLocalQueueAndItsRoom) {
  EXPECT_EQ(global_batch_size(0, 2, 256, 256), 0u);
  EXPECT_EQ(global_batch_size(1, 4, 256, 256), 1u);
  EXPECT_EQ(global_batch_size(100, 2, 256, 256), 51u);    // len / workers + 1
  EXPECT_EQ(global_batch_size(1000, 2, 256, 256), 128u);  // half the local queue
  EXPECT_EQ(global_batch_size(1000, 2, 256, 5), 6u);      // 5 slots + the one run at once
  EXPECT_EQ(global_batch_size(1000, 2, 256, 0), 1u);      // full local queue: a plain pop
  EXPECT_EQ(global_batch_size(1000, 1, 2, 2), 1u);        // the smallest local queue
  EXPECT_EQ(global_batch_size(1000, 0, 256, 256), 128u);  // no division by zero
}

TEST(GlobalBatch, RunsTheOldestAndQueuesTheRestInOrder) {
  GlobalQueue global;
  LocalQueue local(256);
  std::vector<WorkItem> items(30, WorkItem(&noop));
  for (auto& i : items)
    global.push(&i);
  // 1 worker: its share is everything (30 / 1 + 1), well under half of 256.
  WorkItem* first = pop_global_batch(global, local, 1);
  EXPECT_EQ(first, &items[0]);
  EXPECT_EQ(first->next, nullptr);
  EXPECT_TRUE(global.empty());
  EXPECT_EQ(global.pops(), 30u);
  ASSERT_EQ(local.size_estimate(), 29u);
  for (std::size_t i = 1; i < 30; ++i)
    EXPECT_EQ(local.pop(), &items[i]) << "the owner pops the batch in global order";
}

// A nearly full local queue makes the batch smaller; nothing is lost or pushed back.
TEST(GlobalBatch, NearlyFullLocalQueueLosesNothing) {
  GlobalQueue global;
  LocalQueue local(16);
  std::vector<WorkItem> mine(14, WorkItem(&noop));
  for (auto& i : mine)
    ASSERT_TRUE(local.push(&i));
  std::vector<WorkItem> items(20, WorkItem(&noop));
  for (auto& i : items)
    global.push(&i);
  WorkItem* first = pop_global_batch(global, local, 1);
  EXPECT_EQ(first, &items[0]);
  EXPECT_EQ(local.size_estimate(), 16u) << "two slots were free";
  EXPECT_EQ(global.size(), 17u);
  std::vector<int> seen(items.size());
  seen[0]++;
  for (int k = 0; k < 2; ++k)
    seen[index_of(items, local.pop())]++;
  for (WorkItem* i; (i = global.pop()) != nullptr;)
    seen[index_of(items, i)]++;
  for (std::size_t i = 0; i < seen.size(); ++i)
    EXPECT_EQ(seen[i], 1) << "item " << i;
  EXPECT_EQ(local.size_estimate(), 14u) << "the local queue's own items are untouched";

  // A full local queue: a plain pop of one.
  ASSERT_TRUE(local.push(&items[1]));
  ASSERT_TRUE(local.push(&items[2]));
  global.push(&items[3]);
  global.push(&items[4]);
  EXPECT_EQ(pop_global_batch(global, local, 1), &items[3]);
  EXPECT_EQ(global.size(), 1u);
  EXPECT_EQ(local.size_estimate(), 16u);
}

TEST(GlobalBatch, FairnessTakesOnlyAnOwnItemThatWaitedAWholeInterval) {
  LocalQueue q(8);
  std::vector<WorkItem> items(4, WorkItem(&noop));
  std::int64_t seen = -1;
  EXPECT_EQ(take_waiting_oldest(q, seen), nullptr);
  EXPECT_EQ(seen, -1) << "nothing to remember in an empty queue";
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(q.push(&items[static_cast<std::size_t>(i)]));
  EXPECT_EQ(take_waiting_oldest(q, seen), nullptr) << "first sight of the oldest";
  EXPECT_EQ(take_waiting_oldest(q, seen), &items[0]) << "still the oldest a check later";
  EXPECT_EQ(take_waiting_oldest(q, seen), &items[1]) << "the oldest since the previous check";
  EXPECT_EQ(q.pop(), &items[2]);
  EXPECT_EQ(take_waiting_oldest(q, seen), nullptr);
  EXPECT_EQ(seen, -1);
  // An oldest item that leaves between two checks: its successor starts a wait of its own.
  ASSERT_TRUE(q.push(&items[3]));
  EXPECT_EQ(take_waiting_oldest(q, seen), nullptr);
  EXPECT_EQ(q.pop(), &items[3]);
  ASSERT_TRUE(q.push(&items[0]));
  EXPECT_EQ(take_waiting_oldest(q, seen), nullptr) << "a new item at a new position";
  EXPECT_EQ(take_waiting_oldest(q, seen), &items[0]);
}

// Holds a one-worker scheduler's only worker until released.
struct HeldWorker {
  Countdown running{1}, release{1};
  FnItem blocker{[this](Disposition) {
    running.count_down();
    release.wait();
  }};
  explicit HeldWorker(Scheduler& s) {
    s.submit(blocker);
    EXPECT_TRUE(running.wait());
  }
};

TEST(SchedulerGlobalBatch, OneWorkerRunsTheGlobalQueueInOrder) {
  Scheduler s(SchedulerOptions{.workers = 1});
  HeldWorker held(s);
  constexpr int kItems = 40;  // under kGlobalQueueInterval: no fairness check can intervene
  std::vector<int> order;     // written by the one worker only
  Countdown done(kItems);
  std::vector<std::unique_ptr<FnItem>> items;
  for (int i = 0; i < kItems; ++i)
    items.push_back(std::make_unique<FnItem>([&, i](Disposition) {
      order.push_back(i);
      done.count_down();
    }));
  for (auto& i : items)
    ASSERT_TRUE(s.submit(*i));
  held.release.count_down();
  ASSERT_TRUE(done.wait());
  std::vector<int> expected(kItems);
  for (int i = 0; i < kItems; ++i)
    expected[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(order, expected);
  s.stop();
}

// The fairness rule still holds once batches move global items into a local queue: a chain of
// local work (an item that keeps requeueing itself locally) must not keep them waiting.
TEST(SchedulerGlobalBatch, ALocalChainDoesNotStarveItemsMovedFromTheGlobalQueue) {
  Scheduler s(SchedulerOptions{.workers = 1});
  HeldWorker held(s);
  constexpr int kGiveUp = 100'000;
  std::atomic<bool> other_ran{false};
  int chain_runs = 0;  // the one worker's
  int chain_runs_when_other_ran = -1;
  Countdown done(1);
  FnItem chain([&](Disposition d) {
    if (d == Disposition::drop) return;
    if (other_ran.load(std::memory_order_relaxed) || ++chain_runs == kGiveUp) {
      done.count_down();
      return;
    }
    Scheduler::current()->submit(chain, /*prefer_local=*/true);
  });
  std::vector<std::unique_ptr<FnItem>> others;
  for (int i = 0; i < 30; ++i)
    others.push_back(std::make_unique<FnItem>([&](Disposition d) {
      if (d == Disposition::run && !other_ran.exchange(true))
        chain_runs_when_other_ran = chain_runs;
    }));
  // In the global queue: the chain first, then the others. The worker takes them in one batch,
  // runs the chain, and the others wait in its local queue under the chain's resubmissions.
  s.submit(chain);
  for (auto& o : others)
    s.submit(*o);
  held.release.count_down();
  ASSERT_TRUE(done.wait());
  ASSERT_TRUE(other_ran.load()) << "the chain ran " << kGiveUp << " times before anything else";
  // Recorded after the first check, taken at the second: at most two intervals (61 items each).
  EXPECT_LE(chain_runs_when_other_ran, 2 * 61 + 2);
  s.stop();  // the other items may still be queued: run or drop them before they are destroyed
}

// stop() drops what a batch left in the local queue and what is still global, each once.
TEST(SchedulerGlobalBatch, StopDropsBatchedAndGlobalItemsExactlyOnce) {
  auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 1, .local_queue_capacity = 16});
  HeldWorker held(*s);
  constexpr int kItems = 100;
  std::vector<std::atomic<int>> runs(kItems), drops(kItems);
  std::vector<std::unique_ptr<FnItem>> items;
  // Item 0 holds the worker until stop() has begun. The worker took it in a batch of
  // min(100 / 1 + 1, 16 / 2) = 8 items: item 0 running, 1..7 in its local queue, 8.. global
  // (or, one time in 61, alone at a fairness check: then all the others are global).
  items.push_back(std::make_unique<FnItem>([&](Disposition d) {
    (d == Disposition::run ? runs : drops)[0].fetch_add(1);
    if (d == Disposition::run) {
      EXPECT_TRUE(test::eventually([&] { return s->stopping(); }));
    }
  }));
  for (int i = 1; i < kItems; ++i)
    items.push_back(std::make_unique<FnItem>([&, i](Disposition d) {
      (d == Disposition::run ? runs : drops)[static_cast<std::size_t>(i)].fetch_add(1);
    }));
  for (auto& i : items)
    ASSERT_TRUE(s->submit(*i));
  held.release.count_down();
  ASSERT_TRUE(test::eventually([&] { return runs[0].load() == 1; }));
  EXPECT_EQ(s->stop(), static_cast<std::uint64_t>(kItems - 1));
  EXPECT_EQ(runs[0].load(), 1);
  for (int i = 1; i < kItems; ++i) {
    EXPECT_EQ(runs[static_cast<std::size_t>(i)].load(), 0) << "item " << i;
    EXPECT_EQ(drops[static_cast<std::size_t>(i)].load(), 1) << "item " << i;
  }
  auto c = s->counters();
  EXPECT_EQ(c.queued(), 0u);
  EXPECT_EQ(c.run + c.dropped, c.submitted);
}

}  // namespace
}  // namespace arbor::sched
