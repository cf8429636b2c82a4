#include "arbor/sched/global_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace arbor::sched {
namespace {

void noop(WorkItem*, Disposition) noexcept {}

TEST(GlobalQueue, FifoWithBatches) {
  GlobalQueue q;
  std::vector<WorkItem> items(5, WorkItem(&noop));
  q.push(&items[0]);
  items[1].next = &items[2];
  items[2].next = &items[3];
  q.push_batch(&items[1], &items[3], 3);
  q.push(&items[4]);
  EXPECT_EQ(q.size(), 5u);
  for (auto& i : items)
    EXPECT_EQ(q.pop(), &i);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.empty());
}

TEST(GlobalQueue, TakeAllEmptiesIt) {
  GlobalQueue q;
  std::vector<WorkItem> items(3, WorkItem(&noop));
  for (auto& i : items)
    q.push(&i);
  WorkItem* chain = q.take_all();
  int n = 0;
  for (; chain != nullptr; chain = chain->next)
    ++n;
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pop(), nullptr);
}

TEST(GlobalQueue, ManyProducersManyConsumers) {
  constexpr int kPerProducer = 100'000;
  constexpr int kProducers = 3;
  GlobalQueue q;
  std::vector<WorkItem> items(kPerProducer * kProducers, WorkItem(&noop));
  std::vector<std::atomic<std::uint8_t>> seen(items.size());
  std::atomic<int> consumed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p)
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; i += 2) {  // pairs as batches, to mix both paths
        WorkItem* a = &items[static_cast<std::size_t>(p * kPerProducer + i)];
        a->next = a + 1;
        q.push_batch(a, a + 1, 2);
      }
    });
  for (int c = 0; c < 2; ++c)
    threads.emplace_back([&] {
      while (consumed.load() < kPerProducer * kProducers) {
        if (WorkItem* w = q.pop()) {
          seen[static_cast<std::size_t>(w - items.data())].fetch_add(1);
          consumed.fetch_add(1);
        }
      }
    });
  for (auto& t : threads)
    t.join();
  int wrong = 0;
  for (auto& s : seen)
    wrong += s.load() != 1;
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace arbor::sched
