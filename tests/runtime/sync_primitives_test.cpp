// Mutex, Semaphore, Notify, Event, Barrier: wake order, cancellation while waiting (the next
// waiter still gets what it waits for), shutdown while waiting, many tasks across workers (run
// under TSan too), and destruction with waiters (ends the process with a message).
//
// Tasks are made to wait in a known order by waiting (from the test thread) until the
// primitive reports them parked; no test sleeps or asserts on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"
#include "async_support.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using test::canceled;
using test::Cancellable;
using test::until;

// Order in which tasks got what they waited for.
struct Order {
  void add(int id) {
    std::lock_guard guard(mutex);
    ids.push_back(id);
  }
  std::vector<int> get() {
    std::lock_guard guard(mutex);
    return ids;
  }
  std::mutex mutex;
  std::vector<int> ids;
};

// ---------------------------------------------------------------------------------- Mutex

Task<std::error_code> lock_and_record(Mutex& m, Order& order, int id) {
  auto guard = co_await m.lock();
  if (!guard) co_return guard.error();
  order.add(id);
  co_return std::error_code{};
}

TEST(Mutex, TryLockAndGuard) {
  Mutex m;
  auto g = m.try_lock();
  ASSERT_TRUE(g);
  EXPECT_TRUE(m.is_locked());
  EXPECT_FALSE(m.try_lock());
  g.reset();
  EXPECT_FALSE(m.is_locked());
  auto rt = test::make_runtime("auto");
  auto r = rt->block_on([](Mutex& mu) -> Task<bool> {
    auto a = co_await mu.lock();
    if (!a) co_return false;
    Mutex::Guard moved = std::move(*a);
    moved.unlock();
    co_return !mu.is_locked();
  }(m));
  EXPECT_TRUE(r);
}

TEST(Mutex, WaitersGetTheLockInArrivalOrder) {
  auto rt = test::make_runtime("auto");
  Mutex m;
  Order order;
  auto held = m.try_lock();
  std::vector<JoinHandle<std::error_code>> tasks;
  for (int i = 0; i < 8; ++i) {
    tasks.push_back(rt->spawn(lock_and_record(m, order, i)));
    ASSERT_TRUE(until([&] { return m.waiting() == static_cast<std::size_t>(i + 1); }));
  }
  // A task arriving now must queue behind them, not barge in when the lock is handed over.
  held.reset();
  for (auto& t : tasks)
    EXPECT_FALSE(t.join_blocking());
  EXPECT_EQ(order.get(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(m.is_locked());
}

TEST(Mutex, CancelledWaiterLeavesAndTheNextGetsTheLock) {
  auto rt = test::make_runtime("auto");
  Mutex m;
  Order order;
  Cancellable first(*rt);
  auto held = m.try_lock();
  auto a = rt->spawn_in(lock_and_record(m, order, 1), &first.context);
  ASSERT_TRUE(until([&] { return m.waiting() == 1; }));
  auto b = rt->spawn(lock_and_record(m, order, 2));
  ASSERT_TRUE(until([&] { return m.waiting() == 2; }));
  first.cancel();
  EXPECT_TRUE(canceled(a.join_blocking()));
  EXPECT_EQ(m.waiting(), 1u);
  held.reset();
  EXPECT_FALSE(b.join_blocking());
  EXPECT_EQ(order.get(), std::vector<int>{2});
  EXPECT_FALSE(m.is_locked());
}

TEST(Mutex, CancelledLastWaiterLeavesTheLockUncontended) {
  auto rt = test::make_runtime("auto");
  Mutex m;
  Order order;
  Cancellable c(*rt);
  auto held = m.try_lock();
  auto a = rt->spawn_in(lock_and_record(m, order, 1), &c.context);
  ASSERT_TRUE(until([&] { return m.waiting() == 1; }));
  c.cancel();
  EXPECT_TRUE(canceled(a.join_blocking()));
  held.reset();  // the fast path again: nobody to hand over to
  EXPECT_FALSE(m.is_locked());
  EXPECT_TRUE(m.try_lock());
}

TEST(Mutex, AlreadyCancelledTaskDoesNotWaitButTakesAFreeLock) {
  auto rt = test::make_runtime("auto");
  Mutex m;
  Order order;
  Cancellable c(*rt);
  c.cancel();
  EXPECT_FALSE(rt->spawn_in(lock_and_record(m, order, 1), &c.context).join_blocking());
  auto held = m.try_lock();
  EXPECT_TRUE(canceled(rt->spawn_in(lock_and_record(m, order, 2), &c.context).join_blocking()));
  EXPECT_EQ(order.get(), std::vector<int>{1});
}

// One worker: the task that hands the lock over keeps the worker while it cancels the waiter
// it handed it to, so the cancellation lands after the hand-over. The waiter keeps the lock.
TEST(Mutex, WaiterHandedTheLockBeforeItsCancellationKeepsIt) {
  auto rt = test::make_runtime("auto", /*workers=*/1);
  Mutex m;
  Order order;
  Cancellable c(*rt);
  std::optional<Mutex::Guard> held = m.try_lock();
  auto waiter = rt->spawn_in(lock_and_record(m, order, 1), &c.context);
  ASSERT_TRUE(until([&] { return m.waiting() == 1; }));
  rt->block_on([](std::optional<Mutex::Guard>& g, Cancellable& cancel) -> Task<void> {
    g.reset();        // hands the lock to the waiter, which is queued behind us
    cancel.cancel();  // too late: it has the lock
    co_return;
  }(held, c));
  EXPECT_FALSE(waiter.join_blocking());
  EXPECT_EQ(order.get(), std::vector<int>{1});
  EXPECT_FALSE(m.is_locked());
}

TEST(Mutex, ShutdownWakesWaiters) {
  auto rt = test::make_runtime("auto");
  Mutex m;
  Order order;
  auto held = m.try_lock();
  auto a = rt->spawn(lock_and_record(m, order, 1));
  ASSERT_TRUE(until([&] { return m.waiting() == 1; }));
  rt->request_stop();
  EXPECT_TRUE(canceled(a.join_blocking()));
  EXPECT_TRUE(order.get().empty());
}

Task<void> increment_locked(Mutex& m, std::uint64_t& counter, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    auto guard = co_await m.lock();
    EXPECT_TRUE(guard);
    const std::uint64_t seen = counter;  // plain memory: the lock must order these
    if (i % 8 == 0) co_await yield();    // hold it across a suspension sometimes
    counter = seen + 1;
  }
}

TEST(Mutex, ManyTasksAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  Mutex m;
  std::uint64_t counter = 0;
  constexpr int kTasks = 16, kRounds = 500;
  std::vector<JoinHandle<void>> tasks;
  for (int i = 0; i < kTasks; ++i)
    tasks.push_back(rt->spawn(increment_locked(m, counter, kRounds)));
  for (auto& t : tasks)
    t.join_blocking();
  EXPECT_EQ(counter, std::uint64_t{kTasks} * kRounds);
  EXPECT_FALSE(m.is_locked());
}

// ------------------------------------------------------------------------------ Semaphore

Task<std::error_code> acquire_and_record(Semaphore& s, std::size_t n, Order& order, int id) {
  auto permit = co_await s.acquire(n);
  if (!permit) co_return permit.error();
  permit->forget();  // kept: the test gives them back by count
  order.add(id);
  co_return std::error_code{};
}

TEST(Semaphore, LargeRequestIsNotStarvedBySmallOnes) {
  auto rt = test::make_runtime("auto");
  Semaphore s(0);
  Order order;
  auto big = rt->spawn(acquire_and_record(s, 2, order, 1));
  ASSERT_TRUE(until([&] { return s.waiting() == 1; }));
  auto small = rt->spawn(acquire_and_record(s, 1, order, 2));
  ASSERT_TRUE(until([&] { return s.waiting() == 2; }));
  EXPECT_FALSE(s.try_acquire(1));  // nobody barges past the queue
  s.release(1);                    // enough for the small one, not for the first in line
  EXPECT_EQ(s.waiting(), 2u);
  EXPECT_EQ(s.available(), 1u);
  s.release(1);  // the big one now; the small one still waits
  EXPECT_FALSE(big.join_blocking());
  EXPECT_EQ(s.waiting(), 1u);
  EXPECT_EQ(s.available(), 0u);
  s.release(1);
  EXPECT_FALSE(small.join_blocking());
  EXPECT_EQ(order.get(), (std::vector<int>{1, 2}));
}

TEST(Semaphore, CancellingTheFrontGrantsThoseBehindIt) {
  auto rt = test::make_runtime("auto");
  Semaphore s(1);
  Order order;
  Cancellable c(*rt);
  auto big = rt->spawn_in(acquire_and_record(s, 3, order, 1), &c.context);
  ASSERT_TRUE(until([&] { return s.waiting() == 1; }));
  auto small = rt->spawn(acquire_and_record(s, 1, order, 2));
  ASSERT_TRUE(until([&] { return s.waiting() == 2; }));
  c.cancel();  // the permit that was held back for the big one goes to the small one
  EXPECT_TRUE(canceled(big.join_blocking()));
  EXPECT_FALSE(small.join_blocking());
  EXPECT_EQ(s.available(), 0u);
  EXPECT_EQ(order.get(), std::vector<int>{2});
}

TEST(Semaphore, APermitGivesItsPermitsBackOnceAndForgetKeepsThem) {
  Semaphore s(2);
  {
    auto both = s.try_acquire(2);
    ASSERT_TRUE(both);
    EXPECT_EQ(both->count(), 2u);
    EXPECT_FALSE(s.try_acquire());
    EXPECT_EQ(s.available(), 0u);
    Semaphore::Permit moved = std::move(*both);
    EXPECT_EQ(both->count(), 0u);
    moved.release();
    EXPECT_EQ(s.available(), 2u);
    moved.release();  // holds none now: nothing more goes back
    EXPECT_EQ(s.available(), 2u);
  }  // `both` (moved from) gives nothing back either
  EXPECT_EQ(s.available(), 2u);
  const std::size_t kept = s.try_acquire(1)->forget();
  EXPECT_EQ(kept, 1u);
  EXPECT_EQ(s.available(), 1u);  // forgotten permits stay taken
  s.release(kept + 2);           // given back by count, plus two new ones
  EXPECT_EQ(s.available(), 4u);
}

TEST(Semaphore, ADroppedPermitWakesTheNextWaiter) {
  auto rt = test::make_runtime("auto", 1);
  Semaphore s(1);
  auto first = s.try_acquire();
  ASSERT_TRUE(first);
  auto waiter = rt->spawn([](Semaphore& sem) -> Task<std::size_t> {
    auto permit = co_await sem.acquire();
    co_return permit ? permit->count() : 0;
  }(s));
  ASSERT_TRUE(until([&] { return s.waiting() == 1; }));
  first.reset();  // the permit goes: its permit passes to the waiter
  EXPECT_EQ(waiter.join_blocking(), 1u);
  EXPECT_EQ(s.available(), 1u);  // and the waiter's permit came back when its task ended
}

TEST(Semaphore, ShutdownWakesWaiters) {
  auto rt = test::make_runtime("auto");
  Semaphore s(0);
  Order order;
  auto a = rt->spawn(acquire_and_record(s, 1, order, 1));
  ASSERT_TRUE(until([&] { return s.waiting() == 1; }));
  rt->request_stop();
  EXPECT_TRUE(canceled(a.join_blocking()));
}

Task<void> bounded_section(Semaphore& s, std::atomic<int>& inside, std::atomic<int>& peak,
                           int rounds) {
  for (int i = 0; i < rounds; ++i) {
    const std::size_t n = 1 + i % 2;
    auto permit = co_await s.acquire(n);
    EXPECT_TRUE(permit);
    const int now = inside.fetch_add(static_cast<int>(n)) + static_cast<int>(n);
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    co_await yield();
    inside.fetch_sub(static_cast<int>(n));  // then the permit gives them back
  }
}

TEST(Semaphore, ManyTasksAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  Semaphore s(3);
  std::atomic<int> inside{0}, peak{0};
  std::vector<JoinHandle<void>> tasks;
  for (int i = 0; i < 16; ++i)
    tasks.push_back(rt->spawn(bounded_section(s, inside, peak, 300)));
  for (auto& t : tasks)
    t.join_blocking();
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(s.available(), 3u);
}

// --------------------------------------------------------------------------------- Notify

Task<std::error_code> notified_and_record(Notify& n, Order& order, int id) {
  auto ok = co_await n.notified();
  if (!ok) co_return ok.error();
  order.add(id);
  co_return std::error_code{};
}

TEST(Notify, NotifyOneWakesWaitersInOrder) {
  auto rt = test::make_runtime("auto");
  Notify n;
  Order order;
  auto a = rt->spawn(notified_and_record(n, order, 1));
  ASSERT_TRUE(until([&] { return n.waiting() == 1; }));
  auto b = rt->spawn(notified_and_record(n, order, 2));
  ASSERT_TRUE(until([&] { return n.waiting() == 2; }));
  n.notify_one();
  EXPECT_FALSE(a.join_blocking());
  EXPECT_EQ(n.waiting(), 1u);
  n.notify_one();
  EXPECT_FALSE(b.join_blocking());
  EXPECT_EQ(order.get(), (std::vector<int>{1, 2}));
}

TEST(Notify, NotificationBeforeTheWaitIsKeptAsOnePermit) {
  auto rt = test::make_runtime("auto");
  Notify n;
  Order order;
  n.notify_one();
  n.notify_one();  // permits do not add up
  EXPECT_FALSE(rt->spawn(notified_and_record(n, order, 1)).join_blocking());
  Cancellable c(*rt);
  auto second = rt->spawn_in(notified_and_record(n, order, 2), &c.context);
  ASSERT_TRUE(until([&] { return n.waiting() == 1; }));
  c.cancel();
  EXPECT_TRUE(canceled(second.join_blocking()));
  EXPECT_EQ(order.get(), std::vector<int>{1});
}

TEST(Notify, NotifyWaitersWakesEveryoneAndStoresNothing) {
  auto rt = test::make_runtime("auto");
  Notify n;
  Order order;
  std::vector<JoinHandle<std::error_code>> tasks;
  for (int i = 0; i < 5; ++i)
    tasks.push_back(rt->spawn(notified_and_record(n, order, i)));
  ASSERT_TRUE(until([&] { return n.waiting() == 5; }));
  n.notify_waiters();
  for (auto& t : tasks)
    EXPECT_FALSE(t.join_blocking());
  auto late = rt->spawn(notified_and_record(n, order, 9));
  ASSERT_TRUE(until([&] { return n.waiting() == 1; }));  // no permit was stored
  n.notify_one();
  EXPECT_FALSE(late.join_blocking());
}

TEST(Notify, CancelledWaiterDoesNotSwallowTheNextNotification) {
  auto rt = test::make_runtime("auto");
  Notify n;
  Order order;
  Cancellable c(*rt);
  auto a = rt->spawn_in(notified_and_record(n, order, 1), &c.context);
  ASSERT_TRUE(until([&] { return n.waiting() == 1; }));
  auto b = rt->spawn(notified_and_record(n, order, 2));
  ASSERT_TRUE(until([&] { return n.waiting() == 2; }));
  c.cancel();
  EXPECT_TRUE(canceled(a.join_blocking()));
  n.notify_one();
  EXPECT_FALSE(b.join_blocking());
  EXPECT_EQ(order.get(), std::vector<int>{2});
}

TEST(Notify, WaiterChosenBeforeItsCancellationKeepsTheNotification) {
  auto rt = test::make_runtime("auto", 1);
  Notify n;
  Order order;
  Cancellable c(*rt);
  auto a = rt->spawn_in(notified_and_record(n, order, 1), &c.context);
  ASSERT_TRUE(until([&] { return n.waiting() == 1; }));
  rt->block_on([](Notify& notify, Cancellable& cancel) -> Task<void> {
    notify.notify_one();
    cancel.cancel();
    co_return;
  }(n, c));
  EXPECT_FALSE(a.join_blocking());
  EXPECT_EQ(order.get(), std::vector<int>{1});
}

TEST(Notify, ShutdownWakesWaiters) {
  auto rt = test::make_runtime("auto");
  Notify n;
  Order order;
  auto a = rt->spawn(notified_and_record(n, order, 1));
  ASSERT_TRUE(until([&] { return n.waiting() == 1; }));
  rt->request_stop();
  EXPECT_TRUE(canceled(a.join_blocking()));
}

// Ping-pong across workers: every notification is consumed exactly once. (Strict
// alternation: a second notify_one before the first is consumed would be merged into one
// permit, by design.)
Task<void> ping(Notify& mine, Notify& theirs, int rounds, bool serve, std::atomic<int>& count) {
  for (int i = 0; i < rounds; ++i) {
    if (serve) theirs.notify_one();
    EXPECT_TRUE(co_await mine.notified());
    count.fetch_add(1);
    if (!serve) theirs.notify_one();
  }
}

TEST(Notify, PingPongAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr int kPairs = 4, kRounds = 2000;
  std::vector<std::unique_ptr<Notify>> notifies;
  std::atomic<int> count{0};
  std::vector<JoinHandle<void>> tasks;
  for (int p = 0; p < kPairs; ++p) {
    notifies.push_back(std::make_unique<Notify>());
    notifies.push_back(std::make_unique<Notify>());
    Notify& x = *notifies[notifies.size() - 2];
    Notify& y = *notifies.back();
    tasks.push_back(rt->spawn(ping(x, y, kRounds, true, count)));
    tasks.push_back(rt->spawn(ping(y, x, kRounds, false, count)));
  }
  for (auto& t : tasks)
    t.join_blocking();
  EXPECT_EQ(count.load(), 2 * kPairs * kRounds);
}

// ---------------------------------------------------------------------------------- Event

Task<std::error_code> wait_and_record(Event& e, Order& order, int id) {
  auto ok = co_await e.wait();
  if (!ok) co_return ok.error();
  order.add(id);
  co_return std::error_code{};
}

TEST(Event, SetWakesEveryWaiterAndStaysSetUntilReset) {
  auto rt = test::make_runtime("auto");
  Event e;
  Order order;
  std::vector<JoinHandle<std::error_code>> tasks;
  for (int i = 0; i < 4; ++i)
    tasks.push_back(rt->spawn(wait_and_record(e, order, i)));
  ASSERT_TRUE(until([&] { return e.waiting() == 4; }));
  e.set();
  for (auto& t : tasks)
    EXPECT_FALSE(t.join_blocking());
  EXPECT_FALSE(rt->spawn(wait_and_record(e, order, 5)).join_blocking());  // still set
  e.reset();
  EXPECT_FALSE(e.is_set());
  auto late = rt->spawn(wait_and_record(e, order, 6));
  ASSERT_TRUE(until([&] { return e.waiting() == 1; }));
  e.set();
  EXPECT_FALSE(late.join_blocking());
  EXPECT_EQ(order.get().size(), 6u);
}

TEST(Event, CancelledWaiterLeavesTheOthersWaiting) {
  auto rt = test::make_runtime("auto");
  Event e;
  Order order;
  Cancellable c(*rt);
  auto a = rt->spawn_in(wait_and_record(e, order, 1), &c.context);
  ASSERT_TRUE(until([&] { return e.waiting() == 1; }));
  auto b = rt->spawn(wait_and_record(e, order, 2));
  ASSERT_TRUE(until([&] { return e.waiting() == 2; }));
  c.cancel();
  EXPECT_TRUE(canceled(a.join_blocking()));
  EXPECT_EQ(e.waiting(), 1u);
  e.set();
  EXPECT_FALSE(b.join_blocking());
  EXPECT_EQ(order.get(), std::vector<int>{2});
}

TEST(Event, ShutdownWakesWaiters) {
  auto rt = test::make_runtime("auto");
  Event e;
  Order order;
  auto a = rt->spawn(wait_and_record(e, order, 1));
  ASSERT_TRUE(until([&] { return e.waiting() == 1; }));
  rt->request_stop();
  EXPECT_TRUE(canceled(a.join_blocking()));
}

Task<void> relay(std::vector<std::unique_ptr<Event>>& events, std::size_t i,
                 std::atomic<int>& done) {
  EXPECT_TRUE(co_await events[i]->wait());
  if (i + 1 < events.size()) events[i + 1]->set();
  done.fetch_add(1);
}

TEST(Event, RelayAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < 500; ++i)
    events.push_back(std::make_unique<Event>());
  std::atomic<int> done{0};
  std::vector<JoinHandle<void>> tasks;
  for (std::size_t i = events.size(); i-- > 0;)
    tasks.push_back(rt->spawn(relay(events, i, done)));
  events[0]->set();
  for (auto& t : tasks)
    t.join_blocking();
  EXPECT_EQ(done.load(), 500);
}

// -------------------------------------------------------------------------------- Barrier

Task<int> arrive(Barrier& b, int rounds, std::atomic<int>& leaders, std::atomic<int>& phase) {
  int canceled_count = 0;
  for (int i = 0; i < rounds; ++i) {
    auto r = co_await b.arrive_and_wait();
    if (!r) {
      ++canceled_count;
      continue;
    }
    if (r->is_leader()) {
      leaders.fetch_add(1);
      phase.fetch_add(1);
    }
  }
  co_return canceled_count;
}

TEST(Barrier, OneLeaderPerGenerationAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr int kParties = 5, kRounds = 300;
  Barrier b(kParties);
  std::atomic<int> leaders{0}, phase{0};
  std::vector<JoinHandle<int>> tasks;
  for (int i = 0; i < kParties; ++i)
    tasks.push_back(rt->spawn(arrive(b, kRounds, leaders, phase)));
  for (auto& t : tasks)
    EXPECT_EQ(t.join_blocking(), 0);
  EXPECT_EQ(leaders.load(), kRounds);
  EXPECT_EQ(b.generation(), static_cast<std::size_t>(kRounds));
}

TEST(Barrier, CancelledWaiterWithdrawsItsArrival) {
  auto rt = test::make_runtime("auto");
  Barrier b(2);
  std::atomic<int> leaders{0}, phase{0};
  Cancellable c(*rt);
  auto a = rt->spawn_in(arrive(b, 1, leaders, phase), &c.context);
  ASSERT_TRUE(until([&] { return b.waiting() == 1; }));
  c.cancel();
  EXPECT_EQ(a.join_blocking(), 1);
  // Had the arrival stayed, this one would be the second and pass; it waits for a partner.
  auto x = rt->spawn(arrive(b, 1, leaders, phase));
  ASSERT_TRUE(until([&] { return b.waiting() == 1; }));
  EXPECT_EQ(b.generation(), 0u);
  auto y = rt->spawn(arrive(b, 1, leaders, phase));
  EXPECT_EQ(x.join_blocking(), 0);
  EXPECT_EQ(y.join_blocking(), 0);
  EXPECT_EQ(leaders.load(), 1);
}

TEST(Barrier, ShutdownWakesWaiters) {
  auto rt = test::make_runtime("auto");
  Barrier b(3);
  std::atomic<int> leaders{0}, phase{0};
  auto a = rt->spawn(arrive(b, 1, leaders, phase));
  ASSERT_TRUE(until([&] { return b.waiting() == 1; }));
  rt->request_stop();
  EXPECT_EQ(a.join_blocking(), 1);
}

// ------------------------------------------------------- cancellation racing with wake-ups

// Tasks lock and unlock in a loop across workers while the test thread cancels them one by one
// at arbitrary moments. (A wait that can complete at once does not look at the token, so each
// loop also checks it, as a cooperative task does.) Whatever the interleaving, every lock that
// succeeded was released, no hand-off was lost (the survivors finish), and the counter matches the
// successful locks.
Task<std::uint64_t> lock_until_cancelled(Mutex& m, std::uint64_t& counter) {
  const TaskContext& ctx = co_await detail::CurrentContext{};
  std::uint64_t mine = 0;
  while (!ctx.token.stop_requested()) {
    auto guard = co_await m.lock();
    if (!guard) co_return mine;
    ++counter;
    ++mine;
    if (mine % 4 == 0) co_await yield();
  }
  co_return mine;
}

TEST(Mutex, CancellationsRacingWithHandOffsLoseNothing) {
  auto rt = test::make_runtime("auto", 4);
  Mutex m;
  std::uint64_t counter = 0;
  constexpr int kTasks = 8;
  std::vector<std::unique_ptr<Cancellable>> cancels;
  std::vector<JoinHandle<std::uint64_t>> tasks;
  for (int i = 0; i < kTasks; ++i) {
    cancels.push_back(std::make_unique<Cancellable>(*rt));
    tasks.push_back(rt->spawn_in(lock_until_cancelled(m, counter), &cancels.back()->context));
  }
  std::uint64_t total = 0;
  for (int i = 0; i < kTasks; ++i) {
    // Let the survivors make progress between cancellations (no sleep: watch the mutex work).
    for (int spins = 0; spins < 1000 && m.waiting() == 0; ++spins)
      std::this_thread::yield();
    cancels[i]->cancel();
    total += tasks[i].join_blocking();
  }
  EXPECT_EQ(counter, total);
  EXPECT_FALSE(m.is_locked());
  EXPECT_EQ(m.waiting(), 0u);
}

Task<void> acquire_until_cancelled(Semaphore& s, std::atomic<int>& inside) {
  const TaskContext& ctx = co_await detail::CurrentContext{};
  for (std::size_t i = 0; !ctx.token.stop_requested(); ++i) {
    const std::size_t n = 1 + i % 3;
    auto permit = co_await s.acquire(n);
    if (!permit) co_return;
    EXPECT_LE(inside.fetch_add(static_cast<int>(n)) + static_cast<int>(n), 4);
    co_await yield();
    inside.fetch_sub(static_cast<int>(n));  // then the permit gives them back
  }
}

TEST(Semaphore, CancellationsRacingWithGrantsLosePermitsNowhere) {
  auto rt = test::make_runtime("auto", 4);
  Semaphore s(4);
  std::atomic<int> inside{0};
  constexpr int kTasks = 8;
  std::vector<std::unique_ptr<Cancellable>> cancels;
  std::vector<JoinHandle<void>> tasks;
  for (int i = 0; i < kTasks; ++i) {
    cancels.push_back(std::make_unique<Cancellable>(*rt));
    tasks.push_back(rt->spawn_in(acquire_until_cancelled(s, inside), &cancels.back()->context));
  }
  for (int i = 0; i < kTasks; ++i) {
    for (int spins = 0; spins < 1000 && s.waiting() == 0; ++spins)
      std::this_thread::yield();
    cancels[i]->cancel();
    tasks[i].join_blocking();
  }
  EXPECT_EQ(s.available(), 4u);  // every permit granted was released, none leaked
  EXPECT_EQ(s.waiting(), 0u);
}

// ---------------------------------------------------------------- destruction with waiters

// --------------------------------------------------- awaiters inside with_timeout, when_any

// Rule 5 of the cancellable-awaitable protocol (docs/guide.md): an awaiter is
// move-constructible until awaited, because with_timeout and when_any move it into a frame of
// their own. Every primitive's and channel's awaiter (a ParkingAwaiter) once was not, so
// `with_timeout(1s, notify.notified())` did not compile.
static_assert(std::is_move_constructible_v<Mutex::LockAwaiter>);
static_assert(std::is_move_constructible_v<Semaphore::AcquireAwaiter>);
static_assert(std::is_move_constructible_v<Notify::NotifiedAwaiter>);
static_assert(std::is_move_constructible_v<Event::WaitAwaiter>);
static_assert(std::is_move_constructible_v<Barrier::ArriveAwaiter>);
static_assert(std::is_move_constructible_v<mpsc::Receiver<int>::RecvAwaiter>);
static_assert(std::is_move_constructible_v<mpsc::Sender<int>::SendAwaiter>);
static_assert(std::is_move_constructible_v<oneshot::Receiver<int>::RecvAwaiter>);
static_assert(std::is_move_constructible_v<broadcast::Receiver<int>::RecvAwaiter>);
static_assert(std::is_move_constructible_v<watch::Receiver<int>::ChangedAwaiter>);

TEST(AwaiterMoves, PrimitivesAndChannelsWorkInsideWithTimeoutAndWhenAny) {
  using namespace std::chrono_literals;
  auto rt = test::make_runtime("auto");
  auto seen = rt->block_on([]() -> Task<std::vector<int>> {
    std::vector<int> out;
    Notify notify;
    auto quiet = co_await with_timeout(20ms, notify.notified());  // nobody notifies
    out.push_back(!quiet && quiet.error() == std::errc::timed_out ? 1 : 0);
    notify.notify_one();  // a stored permit: the moved awaiter takes it
    out.push_back(co_await with_timeout(10s, notify.notified()) ? 1 : 0);

    Mutex mutex;
    auto guard = co_await with_timeout(10s, mutex.lock());  // Result<Mutex::Guard>
    out.push_back(guard && mutex.try_lock() == std::nullopt ? 1 : 0);

    Event event;
    event.set();
    auto first = co_await when_any(event.wait(), sleep_for(10s));
    out.push_back(static_cast<int>(first.index()));  // 0: the event

    auto [tx, rx] = mpsc::channel<int>(1);
    auto empty = co_await with_timeout(20ms, rx.recv());
    out.push_back(!empty && empty.error() == std::errc::timed_out ? 1 : 0);
    (void)tx.try_send(5);
    auto five = co_await with_timeout(10s, rx.recv());
    out.push_back(five ? *five : -1);

    auto [btx, brx] = broadcast::channel<int>(4);
    (void)btx.send(7);
    auto seven = co_await when_any(brx.recv(), sleep_for(10s));
    out.push_back(seven.index() == 0 && std::get<0>(seven) ? *std::get<0>(seven) : -1);
    co_return out;
  }());
  EXPECT_EQ(seen, (std::vector<int>{1, 1, 1, 0, 1, 5, 7}));
}

// Each primitive's destructor ends the process, naming itself, when tasks still wait on it.
template <class Primitive, class Wait>
void destroy_with_a_waiter(Primitive* p, Wait wait) {
  auto rt = test::make_runtime("auto");
  auto h = rt->spawn(wait(*p));
  while (p->waiting() == 0) {
  }
  delete p;
}

TEST(SyncDestruction, DestroyingAPrimitiveWithWaitersEndsTheProcess) {
  if (test::under_wine()) GTEST_SKIP() << "death tests spawn a second process wine runs slowly";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto* m = new Mutex;
        auto held = m->try_lock();
        held->mutex();
        destroy_with_a_waiter(m, [](Mutex& mu) -> Task<void> { (void)co_await mu.lock(); });
      },
      "arbor::Mutex destroyed while tasks wait on it");
  EXPECT_DEATH(
      destroy_with_a_waiter(new Semaphore(0),
                            [](Semaphore& s) -> Task<void> { (void)co_await s.acquire(); }),
      "arbor::Semaphore destroyed while tasks wait on it");
  EXPECT_DEATH(destroy_with_a_waiter(new Notify,
                                     [](Notify& n) -> Task<void> { (void)co_await n.notified(); }),
               "arbor::Notify destroyed while tasks wait on it");
  EXPECT_DEATH(
      destroy_with_a_waiter(new Event, [](Event& e) -> Task<void> { (void)co_await e.wait(); }),
      "arbor::Event destroyed while tasks wait on it");
  EXPECT_DEATH(
      destroy_with_a_waiter(new Barrier(2),
                            [](Barrier& b) -> Task<void> { (void)co_await b.arrive_and_wait(); }),
      "arbor::Barrier destroyed while tasks wait on it");
}

// Once the waiters are gone (woken or cancelled) a primitive may go at once, even while the
// woken tasks have not run yet: the waker has disarmed their stop callbacks.
TEST(SyncDestruction, DestroyingRightAfterWakingIsSafe) {
  auto rt = test::make_runtime("auto", 1);
  for (int i = 0; i < 100; ++i) {
    Cancellable c(*rt);
    auto* e = new Event;
    Order order;
    auto a = rt->spawn_in(wait_and_record(*e, order, 1), &c.context);
    ASSERT_TRUE(until([&] { return e->waiting() == 1; }));
    rt->block_on([](Event* ev, Cancellable& cancel) -> Task<void> {
      ev->set();
      delete ev;        // the waiter has not resumed yet (one worker: we hold it)
      cancel.cancel();  // its callback is gone: nothing touches the deleted event
      co_return;
    }(e, c));
    EXPECT_FALSE(a.join_blocking());
  }
}

// notify_one() racing with the cancellation of the first waiter (from another thread): the
// notification goes to exactly one place: the first waiter keeps it, or the second gets it. It
// is never lost (the second would wait forever) nor doubled (a permit left over as well).
TEST(Notify, NotifyOneRacingACancellationGoesToExactlyOneWaiter) {
  using namespace std::chrono_literals;
  auto rt = test::make_runtime("auto", 4);
  auto wait = [](Notify& n) -> Task<Result<void>> { co_return co_await n.notified(); };
  for (int round = 0; round < 200; ++round) {
    Notify n;
    Cancellable c(*rt);
    auto first = rt->spawn_in(wait(n), &c.context);
    ASSERT_TRUE(until([&] { return n.waiting() == 1; }));
    auto second = rt->spawn(wait(n));
    ASSERT_TRUE(until([&] { return n.waiting() == 2; }));
    std::thread canceller([&] { c.cancel(); });
    n.notify_one();
    canceller.join();
    auto r1 = first.join_blocking();
    if (r1) {
      EXPECT_EQ(n.waiting(), 1u);  // the second still waits: one notification, one wake
      n.notify_one();
    } else {
      EXPECT_TRUE(canceled(r1.error()));
    }
    EXPECT_TRUE(second.join_blocking().has_value());
    auto leftover = rt->block_on([](Notify& n_in) -> Task<Result<void>> {
      co_return co_await with_timeout(Clock::now() - 1s, n_in.notified());
    }(n));
    EXPECT_EQ(leftover.error(), std::errc::timed_out) << "a permit was stored as well";
  }
}

}  // namespace
}  // namespace arbor
