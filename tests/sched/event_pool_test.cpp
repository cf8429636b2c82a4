// EventPool's per-thread caches (arbor/sched/event_pool.hpp): release into a cache and spill,
// acquire from it and refill, the bound with caches counted, and the lifetimes of caches,
// threads and pools. The lifetime tests assert what they can in any build; the AddressSanitizer
// build checks them for leaks and uses after free, the ThreadSanitizer build for races.
#include "arbor/sched/event_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "arbor/sched/event_tree.hpp"
#include "event_item.hpp"  // private to sched: tested from its source tree
#include "test_support.hpp"

namespace arbor::sched {
namespace {

using test::Countdown;
using Items = std::vector<EventItem*>;

Items take(EventPool& pool, std::size_t n) {
  Items items(n);
  pool.acquire(items.data(), n);
  return items;
}

void give_back(EventPool& pool, const Items& items) {
  for (EventItem* item : items)
    pool.release(item);
}

// Runs `f` on a new thread, which has no cache of any pool yet, and joins it: its caches are
// returned when it exits.
template <class F>
void on_fresh_thread(F f) {
  std::thread(f).join();
}

// At rest, every item the pool allocated is idle or was freed.
void expect_balanced(const EventPool& pool) {
  EXPECT_EQ(pool.allocated() - pool.freed(), pool.idle()) << "items leaked or double-freed";
}

TEST(EventPoolCaches, DefaultsTakeAtMostHalfTheCapacity) {
  for (std::size_t capacity : {0u, 8u, 63u, 64u, 512u, 1024u, 1u << 20}) {
    const EventPoolCaches shape = EventPoolCaches::for_capacity(capacity);
    EXPECT_LE(shape.caches * shape.cache_items, capacity / 2) << capacity;
    EXPECT_LE(shape.caches, EventPool::kMaxCaches);
    EXPECT_TRUE(shape.cache_items == 0 || shape.cache_items >= 8) << capacity;
    EventPool pool(capacity);
    EXPECT_EQ(pool.caches() * pool.cache_items(), shape.caches * shape.cache_items);
  }
  EXPECT_EQ(EventPool(8).caches(), 0u) << "too small to spare any caches";
}

TEST(EventPoolCaches, MustFitInTheCapacity) {
  EXPECT_THROW(EventPool(64, EventPoolCaches{8, 16}), std::invalid_argument);
  EXPECT_THROW(EventPool(1u << 20, EventPoolCaches{EventPool::kMaxCaches + 1, 1}),
               std::invalid_argument);
  EventPool all(64, EventPoolCaches{4, 16});  // caches may take all of it
  EXPECT_EQ(all.caches(), 4u);
  EventPool none(64, EventPoolCaches{4, 0});
  EXPECT_EQ(none.caches(), 0u);
  EXPECT_EQ(none.cache_items(), 0u);
}

TEST(EventPool, ReleasesFillTheThreadsCacheWithoutTheLockAndSpillTheNewerHalf) {
  EventPool pool(256, EventPoolCaches{2, 8});
  on_fresh_thread([&] {
    Items items = take(pool, 9);
    const std::uint64_t trips = pool.shared_trips();
    for (std::size_t i = 0; i < 8; ++i)
      pool.release(items[i]);
    EXPECT_EQ(pool.cached(), 8u);
    EXPECT_EQ(pool.idle(), 8u);
    EXPECT_EQ(pool.shared_trips(), trips) << "filling the cache takes no lock";
    pool.release(items[8]);  // the cache is full: its newer 4 go to the shared list first
    EXPECT_EQ(pool.cached(), 5u);
    EXPECT_EQ(pool.idle(), 9u);
    EXPECT_EQ(pool.shared_trips(), trips + 1);
  });
  // The thread has exited: what its cache held went to the shared list.
  EXPECT_EQ(pool.cached(), 0u);
  EXPECT_EQ(pool.idle(), 9u);
  EXPECT_EQ(pool.freed(), 0u);
  expect_balanced(pool);
}

TEST(EventPool, AcquireDrainsTheCacheFirstThenRefillsItInTheSameLock) {
  EventPool pool(256, EventPoolCaches{2, 8});
  on_fresh_thread([&] { give_back(pool, take(pool, 20)); });  // 20 on the shared list
  ASSERT_EQ(pool.idle(), 20u);
  ASSERT_EQ(pool.cached(), 0u);
  on_fresh_thread([&] {
    Items mine = take(pool, 3);  // acquiring claims no cache: from the shared list
    EXPECT_EQ(pool.cached(), 0u);
    give_back(pool, mine);  // releasing claims one
    EXPECT_EQ(pool.cached(), 3u);
    const std::uint64_t trips = pool.shared_trips();
    Items again = take(pool, 3);
    EXPECT_EQ(pool.shared_trips(), trips) << "served from the cache, no lock";
    std::sort(mine.begin(), mine.end());
    std::sort(again.begin(), again.end());
    EXPECT_EQ(again, mine) << "the cache's items come back first";
    EXPECT_EQ(pool.cached(), 0u);
    // The cache is dry: one lock takes the item and refills the cache to half full.
    Items more = take(pool, 1);
    EXPECT_EQ(pool.shared_trips(), trips + 1);
    EXPECT_EQ(pool.cached(), 4u);
    EXPECT_EQ(pool.idle(), 16u);
    for (int i = 0; i < 4; ++i) {
      Items one = take(pool, 1);
      more.push_back(one[0]);
    }
    EXPECT_EQ(pool.shared_trips(), trips + 1) << "the refill served the next four";
    EXPECT_EQ(pool.allocated(), 20u) << "nothing allocated while items were idle";
    give_back(pool, again);
    give_back(pool, more);
    EXPECT_EQ(pool.cached(), 8u);
  });
  EXPECT_EQ(pool.idle(), 20u);
  expect_balanced(pool);
}

// capacity 40 = a shared list of at most 24 + 2 caches of 8. Every step's figures are exact.
TEST(EventPool, NeverKeepsMoreThanItsCapacityCachesIncluded) {
  EventPool pool(40, EventPoolCaches{2, 8});
  Countdown a_done(1), b_done(1), finish(1);
  // 100 items through one thread: its cache ends full (8), 92 are spilled, 24 kept.
  std::thread a([&] {
    give_back(pool, take(pool, 100));
    a_done.count_down();
    finish.wait();
  });
  test::wait_or_exit(a_done, "the first thread");
  EXPECT_EQ(pool.allocated(), 100u);
  EXPECT_EQ(pool.freed(), 68u);
  EXPECT_EQ(pool.cached(), 8u);
  EXPECT_EQ(pool.idle(), 32u);
  // A second thread takes the 24 (and allocates 76), returns 100: the same again.
  std::thread b([&] {
    give_back(pool, take(pool, 100));
    b_done.count_down();
    finish.wait();
  });
  test::wait_or_exit(b_done, "the second thread");
  EXPECT_EQ(pool.allocated(), 176u);
  EXPECT_EQ(pool.freed(), 136u);
  EXPECT_EQ(pool.cached(), 16u);
  EXPECT_EQ(pool.idle(), 40u) << "full: the capacity, caches included";
  // A third thread finds both caches claimed and uses the shared list, within its bound.
  on_fresh_thread([&] { give_back(pool, take(pool, 30)); });  // 24 idle + 6 new
  EXPECT_EQ(pool.allocated(), 182u);
  EXPECT_EQ(pool.freed(), 142u);
  EXPECT_EQ(pool.cached(), 16u) << "no cache for the third thread";
  EXPECT_EQ(pool.idle(), 40u);
  // The first two exit: their caches' items find the shared list full and are freed.
  finish.count_down();
  a.join();
  b.join();
  EXPECT_EQ(pool.cached(), 0u);
  EXPECT_EQ(pool.freed(), 158u);
  EXPECT_EQ(pool.idle(), 24u);
  expect_balanced(pool);
  // Their caches are free again.
  on_fresh_thread([&] {
    give_back(pool, take(pool, 1));
    EXPECT_EQ(pool.cached(), 1u);
  });
}

// A pool destroyed while a thread still holds items in its cache frees them, and the thread's
// claim does not outlive it: a new pool at the very same address is not taken for the old one.
TEST(EventPool, ThreadOutlivingItsPoolKeepsNoClaimOnIt) {
  std::optional<EventPool> pool;
  pool.emplace(256, EventPoolCaches{2, 8});
  Countdown released(1), replaced(1);
  std::size_t cached_in_new_pool = 0;
  std::thread t([&] {
    give_back(*pool, take(*pool, 5));
    released.count_down();
    replaced.wait();
    give_back(*pool, take(*pool, 3));
    cached_in_new_pool = pool->cached();
  });
  test::wait_or_exit(released, "the releasing thread");
  EXPECT_EQ(pool->cached(), 5u);
  const EventPool* address = &*pool;
  pool.reset();  // frees the 5 items in the live thread's cache
  pool.emplace(256, EventPoolCaches{2, 8});
  EXPECT_EQ(&*pool, address) << "the point is a new pool at the old address";
  replaced.count_down();
  t.join();
  EXPECT_EQ(cached_in_new_pool, 3u) << "the thread used a cache of the new pool";
  EXPECT_EQ(pool->cached(), 0u) << "returned at the thread's exit";
  EXPECT_EQ(pool->idle(), 3u);
  expect_balanced(*pool);
}

// Pools destroyed while the threads that hold their caches exit: each item is freed once, by
// whichever side goes last.
TEST(EventPool, DestroyedWhileItsThreadsExit) {
  for (int round = 0; round < 50; ++round) {
    auto pool = std::make_unique<EventPool>(256, EventPoolCaches{4, 8});
    Countdown filled(4), go(1);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i)
      threads.emplace_back([&] {
        give_back(*pool, take(*pool, 12));  // 8 stay cached, 4 are spilled
        filled.count_down();
        go.wait();
      });
    test::wait_or_exit(filled, "the filling threads");
    EXPECT_EQ(pool->cached(), 32u);
    expect_balanced(*pool);
    go.count_down();
    pool.reset();
    for (auto& t : threads)
      t.join();
  }
}

// Many threads acquire batches and release the items, half of them on another thread (the
// engine's pattern: acquired by a poller, released by workers), while threads come and go and
// caches change hands. Fewer caches than threads, so the shared list is used too.
TEST(EventPool, ManyThreadsStayWithinTheBoundAndLoseNothing) {
  EventPool pool(512, EventPoolCaches{4, 16});
  constexpr int kThreads = 8;
  constexpr int kGenerations = 4;  // each thread slot runs this many threads in turn
  constexpr int kRounds = 300;
  struct Mailbox {
    std::mutex mutex;
    Items items;
  };
  std::vector<Mailbox> boxes(kThreads);
  auto drain = [&](Mailbox& box) {
    Items mine;
    {
      std::lock_guard lock(box.mutex);
      mine.swap(box.items);
    }
    give_back(pool, mine);
  };
  std::vector<std::thread> slots;
  for (int t = 0; t < kThreads; ++t)
    slots.emplace_back([&, t] {
      for (int g = 0; g < kGenerations; ++g)
        std::thread([&, t, g] {
          for (int r = 0; r < kRounds; ++r) {
            const std::size_t n = 1 + static_cast<std::size_t>((r * 7 + t + g) % 24);
            Items items = take(pool, n);
            for (EventItem* item : items)
              EXPECT_EQ(item->pool, &pool);
            const std::size_t half = n / 2;
            {
              Mailbox& next = boxes[static_cast<std::size_t>((t + 1) % kThreads)];
              std::lock_guard lock(next.mutex);
              next.items.insert(next.items.end(), items.begin(), items.begin() + half);
            }
            give_back(pool, Items(items.begin() + half, items.end()));
            drain(boxes[static_cast<std::size_t>(t)]);
            if (r % 50 == 0) (void)pool.idle();  // a racy snapshot, read while others work
          }
        }).join();
    });
  for (auto& s : slots)
    s.join();
  for (auto& box : boxes)
    drain(box);
  EXPECT_LE(pool.idle(), pool.capacity());
  EXPECT_LE(pool.cached(), 4u * 16u);
  expect_balanced(pool);
}

void count_event(const Event& e, Disposition) noexcept {
  static_cast<Countdown*>(e.target)->count_down();
}

// Through the scheduler: workers release into their caches, take the shared list's lock about
// once per half a cache, and hand their caches back when the scheduler stops.
TEST(EventPool, WorkersCacheTheirReleasesAndReturnThemAtStop) {
  EventPool pool(256, EventPoolCaches{4, 16});
  constexpr std::size_t kBursts = 100;
  constexpr std::size_t kBurst = 300;
  {
    Scheduler s(SchedulerOptions{.workers = 2});
    for (std::size_t b = 0; b < kBursts; ++b) {
      Countdown done(kBurst);
      std::vector<Event> events(kBurst, Event{&count_event, &done, 0, 0});
      submit_event_trees(s, pool, events);
      ASSERT_TRUE(done.wait());
      ASSERT_TRUE(test::eventually([&] { return pool.allocated() - pool.freed() == pool.idle(); }))
          << "an item never came back";
    }
    EXPECT_GT(pool.cached(), 0u) << "the workers released into caches";
    EXPECT_LE(pool.idle(), pool.capacity());
    // One lock per burst (its acquire) and one per 8 releases (a spill): nowhere near one per
    // event, which is what the pool cost before it had caches.
    EXPECT_LE(pool.shared_trips(), kBursts + kBursts * kBurst / 8);
  }
  EXPECT_EQ(pool.cached(), 0u) << "the workers' caches were returned when they exited";
  EXPECT_LE(pool.idle(), pool.capacity());
  expect_balanced(pool);
}

}  // namespace
}  // namespace arbor::sched
