// Cancellation that composes: this_task::stop_token, the protocol for user awaitables (Gate),
// JoinHandle::abort, interruptible joins, with_timeout on any awaitable.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"
#include "async_support.hpp"
#include "gate.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using test::Gate;
using test::until;

constexpr auto kCanceled = std::errc::operation_canceled;
constexpr auto kTimedOut = std::errc::timed_out;

Task<Result<void>> wait_on(Gate& gate) {
  co_return co_await gate.wait();
}
Task<Result<void>> sleep_long() {
  co_return co_await sleep_for(1h);
}

TEST(Cancel, ThisTaskSeesItsTokenAndRuntime) {
  auto rt = test::make_runtime("auto");
  auto task = [](Runtime* expected) -> Task<bool> {
    std::stop_token token = co_await this_task::stop_token();
    Runtime* runtime = co_await this_task::runtime();
    co_return token.stop_possible() && !token.stop_requested() && runtime == expected;
  };
  EXPECT_TRUE(rt->block_on(task(rt.get())));
  // An abortable task's token is its own: abort() stops it, the runtime's stays untouched.
  auto h = rt->spawn_abortable([]() -> Task<bool> {
    for (;;) {
      std::stop_token token = co_await this_task::stop_token();
      if (token.stop_requested()) co_return true;
      co_await yield();
    }
  }());
  h.abort();
  EXPECT_TRUE(h.join_blocking());
  EXPECT_FALSE(rt->stop_token().stop_requested());
}

TEST(Cancel, GateWakesItsWaiterWhenOpened) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  auto h = rt->spawn(wait_on(gate));
  gate.open();
  EXPECT_TRUE(h.join_blocking().has_value());
  Gate already_open;
  already_open.open();
  EXPECT_TRUE(rt->block_on(wait_on(already_open)).has_value());
}

// abort() before or while the task waits: either way the wait ends with operation_canceled.
TEST(Cancel, AbortInterruptsASleepAndAUserAwaitable) {
  auto rt = test::make_runtime("auto");
  auto sleeping = rt->spawn_abortable(sleep_long());
  Gate gate;
  auto waiting = rt->spawn_abortable(wait_on(gate));
  EXPECT_TRUE(sleeping.abortable());
  sleeping.abort();
  waiting.abort();
  waiting.abort();  // idempotent
  EXPECT_EQ(sleeping.join_blocking().error(), kCanceled);
  EXPECT_EQ(waiting.join_blocking().error(), kCanceled);
}

// The aborted task's awaited children and its when_all children run under its context.
TEST(Cancel, AbortReachesAwaitedChildrenAndWhenAll) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  auto h = rt->spawn_abortable([](Gate& g) -> Task<int> {
    auto [a, b] = co_await when_all(sleep_long(), wait_on(g));
    Result<void> c = co_await sleep_long();  // after the abort: canceled at once
    co_return (a.error() == kCanceled) + (b.error() == kCanceled) + (c.error() == kCanceled);
  }(gate));
  h.abort();
  EXPECT_EQ(h.join_blocking(), 3);
}

TEST(Cancel, AbortOnAPlainTaskIsALogicError) {
  auto rt = test::make_runtime("auto");
  auto h = rt->spawn([]() -> Task<> { co_return; }());
  EXPECT_FALSE(h.abortable());
  EXPECT_THROW(h.abort(), std::logic_error);
  h.join_blocking();
}

// Under the runtime's shared token (no callback of its own for engine operations), a user
// awaitable's callback still runs at shutdown.
TEST(Cancel, ShutdownWakesAUserAwaitableUnderTheRootContext) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  std::atomic<bool> cancelled{false};
  rt->spawn([](Gate& g, std::atomic<bool>& c) -> Task<> {
      c = (co_await g.wait()).error() == kCanceled;
    }(gate, cancelled))
      .detach();
  rt->shutdown();
  EXPECT_EQ(rt->live_tasks(), 0);
  EXPECT_TRUE(cancelled);
}

// A cancelled joiner stops waiting (system_error); the joined task runs on and its handle can
// be awaited again.
TEST(Cancel, AJoinIsInterruptedAndTheHandleStaysUsable) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  auto inner = rt->spawn([](Gate& g) -> Task<int> {
    (void)co_await g.wait();
    co_return 7;
  }(gate));
  auto outer = rt->spawn_abortable([](JoinHandle<int>& h) -> Task<bool> {
    try {
      co_await std::move(h);
    } catch (const std::system_error& e) {
      co_return e.code() == std::errc::operation_canceled;
    }
    co_return false;
  }(inner));
  outer.abort();
  EXPECT_TRUE(outer.join_blocking());
  gate.open();
  EXPECT_EQ(rt->block_on([](JoinHandle<int> h) -> Task<int> {
    co_return co_await std::move(h);
  }(std::move(inner))),
            7);
}

// Open and abort race from two threads: exactly one wins, the waiter always wakes (TSan).
TEST(Cancel, OpenRacesAbortAcrossWorkers) {
  auto rt = test::make_runtime("auto", 2);
  constexpr int kRounds = 2000;
  int opened = 0;
  int cancelled = 0;
  for (int i = 0; i < kRounds; ++i) {
    Gate gate;
    auto h = rt->spawn_abortable(wait_on(gate));
    auto opener = rt->spawn([](Gate& g) -> Task<> {
      g.open();
      co_return;
    }(gate));
    h.abort();
    auto r = h.join_blocking();
    opener.join_blocking();  // the gate must outlive its opener
    if (r) {
      ++opened;
    } else {
      ++cancelled;
      EXPECT_EQ(r.error(), kCanceled);
    }
  }
  EXPECT_EQ(opened + cancelled, kRounds);
}

TEST(Timeout, InterruptsAUserAwaitable) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  auto r = rt->block_on(
      [](Gate& g) -> Task<Result<void>> { co_return co_await with_timeout(1ms, g.wait()); }(gate));
  EXPECT_EQ(r.error(), kTimedOut);
}

TEST(Timeout, TakesADeadlineAndKeepsAResultThatCameFirst) {
  auto rt = test::make_runtime("auto");
  auto r = rt->block_on([]() -> Task<Result<void>> {
    co_return co_await with_timeout(Clock::now() + 1ms, sleep_for(1h));
  }());
  EXPECT_EQ(r.error(), kTimedOut);
  Gate open;
  open.open();
  auto ok = rt->block_on([](Gate& g) -> Task<Result<void>> {
    co_return co_await with_timeout(Clock::now() + 1h, g.wait());
  }(open));
  EXPECT_TRUE(ok.has_value());
  auto v = rt->block_on([]() -> Task<Result<int>> {
    co_return co_await with_timeout(1h, []() -> Task<int> { co_return 5; }());
  }());
  EXPECT_EQ(*v, 5);
}

TEST(Timeout, InterruptsAJoin) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  auto inner = rt->spawn([](Gate& g) -> Task<int> {
    (void)co_await g.wait();
    co_return 1;
  }(gate));
  auto r = rt->block_on([](JoinHandle<int>& h) -> Task<Result<int>> {
    co_return co_await with_timeout(1ms, std::move(h));
  }(inner));
  EXPECT_EQ(r.error(), kTimedOut);
  EXPECT_FALSE(inner.valid());  // moved into with_timeout, which detached it when it ended
  gate.open();                  // the task ends; the runtime's destructor waits for it
}

TEST(Timeout, InterruptsAnIoAwaiter) {
  auto rt = test::make_runtime("auto");
  auto r = rt->block_on([](Runtime& runtime) -> Task<Result<std::size_t>> {
    auto socket = UdpSocket::bind(runtime, *Address::parse("127.0.0.1:0"));
    if (!socket) co_return socket.error();
    std::byte buffer[16];
    Address from;
    co_return co_await with_timeout(1ms, socket->receive_from(buffer, from));
  }(*rt));
  EXPECT_EQ(r.error(), kTimedOut);
}

// The caller's cancellation reaches the awaitable inside with_timeout.
TEST(Timeout, CancellingTheCallerCancelsTheAwaitable) {
  Gate gate;  // before the runtime: a waiter's stop callback may read it as the runtime stops
  auto rt = test::make_runtime("auto");
  auto h = rt->spawn_abortable(
      [](Gate& g) -> Task<Result<void>> { co_return co_await with_timeout(1h, g.wait()); }(gate));
  h.abort();
  EXPECT_EQ(h.join_blocking().error(), kCanceled);
}

// Every primitive's and channel's wait follows the protocol, rule 5 included (movable until
// awaited), so with_timeout and when_any take them like any other awaitable. A deadline in the
// past: a wait that would park is cancelled; one that can complete at once keeps its result.
TEST(Timeout, TakesThePrimitivesAndChannelsWaits) {
  auto rt = test::make_runtime("auto");
  rt->block_on([]() -> Task<> {
    const auto past = Clock::now() - 1s;
    Mutex m;
    auto held = m.try_lock();
    EXPECT_EQ((co_await with_timeout(past, m.lock())).error(), kTimedOut);
    held->unlock();
    auto guard = co_await with_timeout(past, m.lock());  // free: taken at once
    EXPECT_TRUE(guard.has_value());
    Semaphore s(1);
    EXPECT_EQ((co_await with_timeout(past, s.acquire(2))).error(), kTimedOut);
    EXPECT_TRUE((co_await with_timeout(past, s.acquire(1))).has_value());
    Notify n;
    EXPECT_EQ((co_await with_timeout(past, n.notified())).error(), kTimedOut);
    Event e;
    EXPECT_EQ((co_await with_timeout(past, e.wait())).error(), kTimedOut);
    Barrier b(2);
    EXPECT_EQ((co_await with_timeout(past, b.arrive_and_wait())).error(), kTimedOut);
    EXPECT_EQ(b.waiting(), 0u);  // the arrival was withdrawn
    auto [tx, rx] = mpsc::channel<int>(1);
    EXPECT_EQ((co_await with_timeout(past, rx.recv())).error(), kTimedOut);
    EXPECT_TRUE(tx.try_send(1));
    EXPECT_EQ(*(co_await with_timeout(past, rx.recv())), 1);
    auto [otx, orx] = oneshot::channel<int>();
    EXPECT_EQ((co_await with_timeout(past, orx.recv())).error(), kTimedOut);
    auto [btx, brx] = broadcast::channel<int>(2);
    EXPECT_EQ((co_await with_timeout(past, brx.recv())).error(), kTimedOut);
    auto [wtx, wrx] = watch::channel<int>(0);
    EXPECT_EQ((co_await with_timeout(past, wrx.changed())).error(), kTimedOut);
    // when_any moves them into contestants too: the set event wins, the notification is
    // cancelled.
    e.set();
    auto first = co_await when_any(e.wait(), n.notified());
    EXPECT_EQ(first.index(), 0u);
    EXPECT_EQ(n.waiting(), 0u);
  }());
}

// A join cancelled (from another thread) as the joined task finishes: the join returns the
// value, or throws operation_canceled and the handle still gives the value; never neither.
TEST(Cancel, JoinCancellationsRacingCompletionsLoseNothing) {
  auto rt = test::make_runtime("auto", 4);
  for (int i = 0; i < 200; ++i) {
    Gate gate;
    auto child = rt->spawn([](Gate& g, int v) -> Task<int> {
      (void)co_await g.wait();
      co_return v;
    }(gate, i));
    std::stop_source stop;
    TaskContext ctx{rt.get(), stop.get_token()};
    std::atomic<bool> joining{false};
    auto joiner = rt->spawn_in(
        [](JoinHandle<int>& h, std::atomic<bool>& j) -> Task<int> {
          j = true;
          try {
            co_return co_await std::move(h);
          } catch (const std::system_error& e) {
            EXPECT_EQ(e.code(), kCanceled);
            co_return -1;
          }
        }(child, joining),
        &ctx);
    ASSERT_TRUE(until([&] { return joining.load(); }));
    std::thread canceller([&] { stop.request_stop(); });
    gate.open();
    canceller.join();
    const int got = joiner.join_blocking();
    if (got == -1) {
      ASSERT_TRUE(child.valid());
      EXPECT_EQ(child.join_blocking(), i);  // the handle still has the result
    } else {
      EXPECT_EQ(got, i);
    }
  }
}

}  // namespace
}  // namespace arbor
