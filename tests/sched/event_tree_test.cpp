#include "arbor/sched/event_tree.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "event_item.hpp"  // private to sched: tested from its source tree
#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;

struct Tally {
  std::vector<std::atomic<int>> runs;
  std::atomic<int> drops{0};
  Countdown* done = nullptr;
  explicit Tally(std::size_t n) : runs(n) {}
};

void on_event(const Event& e, Disposition d) noexcept {
  auto* tally = static_cast<Tally*>(e.target);
  if (d == Disposition::run) {
    tally->runs[e.data].fetch_add(1, std::memory_order_relaxed);
  } else {
    tally->drops.fetch_add(1, std::memory_order_relaxed);
  }
  if (tally->done != nullptr) tally->done->count_down();
}

// Walks a tree, checking it is well formed; returns its size and writes its depth.
std::size_t walk(const EventItem* node, std::size_t level, std::size_t& depth,
                 std::vector<int>& seen, const std::vector<EventItem*>& nodes) {
  if (node == nullptr) return 0;
  depth = std::max(depth, level);
  auto it = std::find(nodes.begin(), nodes.end(), node);
  EXPECT_NE(it, nodes.end());
  ++seen[static_cast<std::size_t>(it - nodes.begin())];
  return 1 + walk(node->left, level + 1, depth, seen, nodes) +
         walk(node->right, level + 1, depth, seen, nodes);
}

TEST(EventTree, DepthFormula) {
  EXPECT_EQ(event_tree_depth(0), 0u);
  EXPECT_EQ(event_tree_depth(1), 1u);
  EXPECT_EQ(event_tree_depth(3), 2u);
  EXPECT_EQ(event_tree_depth(4), 3u);
  EXPECT_EQ(event_tree_depth(7), 3u);
  EXPECT_EQ(event_tree_depth(64), 7u);
}

// Every n in 1..1000 and several bounds: each node in exactly one tree, no tree larger than
// the bound, each tree as shallow as a balanced tree of its size.
TEST(EventTree, PackingBoundsHoldForEveryBatchSize) {
  for (std::size_t max_tree : {1u, 2u, 7u, 16u, 64u, 1000u}) {
    for (std::size_t n = 1; n <= 1000; ++n) {
      std::vector<EventItem> storage(n);
      std::vector<EventItem*> nodes;
      for (auto& e : storage)
        nodes.push_back(&e);
      std::size_t roots = 0;
      EventItem* root = pack_event_trees(nodes.data(), n, max_tree, roots);
      ASSERT_EQ(roots, (n + max_tree - 1) / max_tree) << n << "/" << max_tree;
      std::vector<int> seen(n);
      std::size_t trees = 0;
      for (WorkItem* r = root; r != nullptr; r = r->next, ++trees) {
        std::size_t depth = 0;
        std::size_t size = walk(static_cast<EventItem*>(r), 1, depth, seen, nodes);
        ASSERT_LE(size, max_tree);
        ASSERT_EQ(depth, event_tree_depth(size)) << "tree of " << size << " is not balanced";
      }
      ASSERT_EQ(trees, roots);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(seen[i], 1) << "node " << i << " n=" << n;
    }
  }
}

TEST(EventTree, EveryEventRunsExactlyOnceForEveryBatchSize) {
  Scheduler s(SchedulerOptions{.workers = 2});
  EventPool pool(256);
  for (std::size_t n = 1; n <= 1000; ++n) {
    Tally tally(n);
    Countdown done(static_cast<std::uint32_t>(n));
    tally.done = &done;
    std::vector<Event> events(n);
    for (std::size_t i = 0; i < n; ++i)
      events[i] = Event{&on_event, &tally, 0, i};
    std::size_t trees = submit_event_trees(s, pool, events, 16);
    ASSERT_EQ(trees, (n + 15) / 16);
    ASSERT_TRUE(done.wait()) << "n=" << n;
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(tally.runs[i].load(), 1) << i << " of " << n;
  }
  EXPECT_LE(pool.idle(), pool.capacity());
  auto c = s.counters();
  EXPECT_EQ(c.submitted, 1000u * 1001u / 2u);
}

TEST(EventTree, QueuedCountsPackedEventsNotYetRun) {
  Scheduler s(SchedulerOptions{.workers = 1});
  EventPool pool(64);
  // Occupy the only worker so the tree waits in the queue, then look at the counters.
  Countdown release(1), blocker_running(1);
  test::FnItem blocker([&](Disposition) {
    blocker_running.count_down();
    release.wait();
  });
  s.submit(blocker);
  ASSERT_TRUE(blocker_running.wait());
  Tally tally(40);
  Countdown done(40);
  tally.done = &done;
  std::vector<Event> events(40);
  for (std::size_t i = 0; i < 40; ++i)
    events[i] = Event{&on_event, &tally, 0, i};
  submit_event_trees(s, pool, events, 16);
  EXPECT_EQ(s.counters().queued(), 40u)
      << "the 40 packed events; the running blocker is not queued";
  release.count_down();
  ASSERT_TRUE(done.wait());
  ASSERT_TRUE(test::eventually([&] { return s.counters().queued() == 0; }));
}

TEST(EventPool, NeverKeepsMoreThanItsBound) {
  EventPool pool(8);
  std::vector<EventItem*> items(100);
  pool.acquire(items.data(), items.size());
  EXPECT_EQ(pool.allocated(), 100u);
  for (auto* item : items)
    pool.release(item);
  EXPECT_EQ(pool.idle(), 8u);
  EXPECT_EQ(pool.freed(), 92u);
  // Reuse before allocating.
  pool.acquire(items.data(), 8);
  EXPECT_EQ(pool.allocated(), 100u);
  EXPECT_EQ(pool.idle(), 0u);
  for (int i = 0; i < 8; ++i)
    pool.release(items[static_cast<std::size_t>(i)]);
  EXPECT_EQ(pool.idle(), 8u);
}

TEST(EventPool, BoundHoldsUnderConcurrentBursts) {
  Scheduler s(SchedulerOptions{.workers = 2});
  EventPool pool(32);
  constexpr int kBursts = 200;
  constexpr std::size_t kBurst = 300;
  Tally tally(kBurst);
  for (int b = 0; b < kBursts; ++b) {
    Countdown done(kBurst);
    tally.done = &done;
    std::vector<Event> events(kBurst);
    for (std::size_t i = 0; i < kBurst; ++i)
      events[i] = Event{&on_event, &tally, 0, i};
    submit_event_trees(s, pool, events);
    ASSERT_LE(pool.idle(), pool.capacity());
    ASSERT_TRUE(done.wait());
  }
  EXPECT_LE(pool.idle(), pool.capacity());
  EXPECT_EQ(pool.allocated() - pool.freed(), pool.idle()) << "items leaked or double-freed";
}

TEST(EventTree, StopDropsEveryUnrunEvent) {
  EventPool pool(16);
  constexpr std::size_t kEvents = 500;
  Tally tally(kEvents);
  auto s = std::make_unique<Scheduler>(SchedulerOptions{.workers = 1});
  Countdown release(1), blocker_running(1);
  test::FnItem blocker([&](Disposition) {
    blocker_running.count_down();
    release.wait();
  });
  s->submit(blocker);
  ASSERT_TRUE(blocker_running.wait());
  std::vector<Event> events(kEvents);
  for (std::size_t i = 0; i < kEvents; ++i)
    events[i] = Event{&on_event, &tally, 0, i};
  submit_event_trees(*s, pool, events, 8);
  std::thread stopper([&] { EXPECT_EQ(s->stop(), kEvents); });
  // Only once stop() has begun may the worker come back: it then exits instead of running.
  ASSERT_TRUE(test::eventually([&] { return s->stopping(); }));
  release.count_down();
  stopper.join();
  int runs = 0;
  for (auto& r : tally.runs)
    runs += r.load();
  EXPECT_EQ(runs + tally.drops.load(), static_cast<int>(kEvents));
  EXPECT_EQ(pool.allocated() - pool.freed(), pool.idle()) << "tree nodes leaked on drop";
}

}  // namespace
}  // namespace arbor::sched
