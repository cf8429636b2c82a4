#include "arbor/sched/local_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace arbor::sched {
namespace {

void noop(WorkItem*, Disposition) noexcept {}

TEST(LocalQueue, OwnerEndIsLifoThiefEndIsFifo) {
  LocalQueue q(8);
  std::vector<WorkItem> items(4, WorkItem(&noop));
  for (auto& i : items)
    ASSERT_TRUE(q.push(&i));
  EXPECT_EQ(q.steal(), &items[0]);
  EXPECT_EQ(q.pop(), &items[3]);
  EXPECT_EQ(q.steal(), &items[1]);
  EXPECT_EQ(q.pop(), &items[2]);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(q.steal(), nullptr);
}

TEST(LocalQueue, BoundedPushFailsWhenFull) {
  LocalQueue q(5);  // rounded up to 8
  EXPECT_EQ(q.capacity(), 8u);
  std::vector<WorkItem> items(9, WorkItem(&noop));
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(q.push(&items[i]));
  EXPECT_FALSE(q.push(&items[8]));
  EXPECT_EQ(q.size_estimate(), 8u);
}

TEST(LocalQueue, TakeOlderHalfReturnsTheOldestInOrder) {
  LocalQueue q(8);
  std::vector<WorkItem> items(8, WorkItem(&noop));
  for (auto& i : items)
    ASSERT_TRUE(q.push(&i));
  std::size_t n = 0;
  WorkItem* chain = q.take_older_half(n);
  ASSERT_EQ(n, 4u);
  for (int i = 0; i < 4; ++i, chain = chain->next)
    EXPECT_EQ(chain, &items[i]);
  EXPECT_EQ(chain, nullptr);
  EXPECT_EQ(q.size_estimate(), 4u);
  EXPECT_EQ(q.pop(), &items[7]);
}

TEST(LocalQueue, WrapsAroundManyTimes) {
  LocalQueue q(4);
  std::vector<WorkItem> items(3, WorkItem(&noop));
  for (int round = 0; round < 1000; ++round) {
    for (auto& i : items)
      ASSERT_TRUE(q.push(&i));
    EXPECT_EQ(q.steal(), &items[0]);
    EXPECT_EQ(q.pop(), &items[2]);
    EXPECT_EQ(q.pop(), &items[1]);
  }
}

// The owner pushes and pops 10^6 items while three thieves steal: each item must be taken
// exactly once (a double take or a loss shows in the per-item counts).
TEST(LocalQueue, ConcurrentOwnerAndThievesTakeEachItemOnce) {
  constexpr int kItems = 1'000'000;
  LocalQueue q(256);
  std::vector<WorkItem> items(kItems, WorkItem(&noop));
  std::vector<std::atomic<std::uint8_t>> taken(kItems);
  auto index_of = [&](WorkItem* w) { return static_cast<std::size_t>(w - items.data()); };
  std::atomic<bool> owner_done{false};
  std::atomic<int> total{0};
  std::vector<std::thread> thieves;
  for (int t = 0; t < 3; ++t)
    thieves.emplace_back([&] {
      while (!owner_done.load(std::memory_order_acquire) || q.size_estimate() > 0) {
        if (WorkItem* w = q.steal()) {
          taken[index_of(w)].fetch_add(1);
          total.fetch_add(1);
        }
      }
    });
  for (int i = 0; i < kItems; ++i) {
    while (!q.push(&items[i])) {
      if (WorkItem* w = q.pop()) {
        taken[index_of(w)].fetch_add(1);
        total.fetch_add(1);
      }
    }
    if (i % 3 == 0) {
      if (WorkItem* w = q.pop()) {
        taken[index_of(w)].fetch_add(1);
        total.fetch_add(1);
      }
    }
  }
  while (WorkItem* w = q.pop()) {
    taken[index_of(w)].fetch_add(1);
    total.fetch_add(1);
  }
  owner_done.store(true, std::memory_order_release);
  for (auto& t : thieves)
    t.join();
  EXPECT_EQ(total.load(), kItems);
  int wrong = 0;
  for (auto& t : taken)
    wrong += t.load() != 1;
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace arbor::sched
