// arbor::asio's Context and executor, and the use_task / cancel_with tokens, with Asio alone
// (no Beast): where handlers run, in which order, when the work is over, what happens to
// handlers still queued when things stop, co_spawn, and Asio operations awaited in Tasks.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/defer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <future>
#include <latch>
#include <thread>
#include <vector>

#include "arbor/asio/asio.hpp"
#include "runtime/runtime_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace net = boost::asio;

std::unique_ptr<arbor::Runtime> runtime_with(int workers) {
  arbor::RuntimeOptions o;
  o.scheduler.workers = workers;
  return std::move(arbor::Runtime::create(o).value());
}

bool on_worker(arbor::Runtime& rt) {
  return arbor::sched::Scheduler::current() == &rt.scheduler();
}

// Counts how often it was called and destroyed (moved-from copies do not count).
struct Counted {
  std::atomic<int>* calls;
  std::atomic<int>* destroyed;
  bool live = true;
  Counted(std::atomic<int>* c, std::atomic<int>* d) : calls(c), destroyed(d) {}
  Counted(Counted&& o) noexcept : calls(o.calls), destroyed(o.destroyed) { o.live = false; }
  ~Counted() {
    if (live) {
      destroyed->fetch_add(1);
      destroyed->notify_all();
    }
  }
  void operator()() { calls->fetch_add(1); }
};

TEST(AsioExecutor, PostRunsOnAWorkerAndNeverInlineDispatchRunsInlineOnAWorker) {
  auto rt = runtime_with(1);  // one worker: what is queued cannot run before the poster returns
  arbor::asio::Context ctx(*rt);
  std::vector<int> seen;  // written by the first handler, read once the last has run
  std::atomic<int> later{0};
  std::promise<void> done;
  const auto one_later = [&] {
    seen.push_back(on_worker(*rt) ? 1 : 0);
    if (later.fetch_add(1) == 1) done.set_value();
  };
  net::post(ctx, [&] {
    seen.push_back(on_worker(*rt) ? 1 : 0);
    net::post(ctx, one_later);
    seen.push_back(later.load());  // 0: queued behind us
    bool dispatched_ran = false;
    net::dispatch(ctx, [&] { dispatched_ran = true; });
    seen.push_back(dispatched_ran ? 1 : 0);  // 1: inline, we are on a worker
    net::defer(ctx, one_later);
    seen.push_back(later.load());  // 0: queued too
  });
  done.get_future().get();
  EXPECT_EQ(seen, (std::vector<int>{1, 0, 1, 0, 1, 1}));  // then both ran, on the worker
  ctx.wait_idle();
}

// The executor itself promises no order (arbor's workers steal, as io_context's threads
// would run concurrently); a strand over it does, as Asio defines.
TEST(AsioExecutor, PostsThroughAStrandRunInOrderOnWorkers) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  auto strand = net::make_strand(ctx.get_executor());
  std::vector<int> order;
  std::atomic<int> wrong_thread{0};
  for (int i = 0; i < 1000; ++i)
    net::post(strand, [&, i] {
      if (!on_worker(*rt)) wrong_thread.fetch_add(1);
      order.push_back(i);
    });
  ctx.wait_idle();  // every post ran: each counted as work until then
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(wrong_thread.load(), 0);
}

TEST(AsioExecutor, AStrandOverTheExecutorRunsHandlersOneAtATimeOnWorkers) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  auto strand = net::make_strand(ctx.get_executor());
  int unguarded = 0;  // TSan would report a race if two ran at once
  std::atomic<int> off_worker{0};
  for (int i = 0; i < 2000; ++i)
    net::post(strand, [&] {
      if (!on_worker(*rt)) off_worker.fetch_add(1);
      ++unguarded;
    });
  ctx.wait_idle();
  EXPECT_EQ(unguarded, 2000);
  EXPECT_EQ(off_worker.load(), 0);
}

TEST(AsioExecutor, TrackedExecutorsAndQueuedHandlersAreOutstandingWork) {
  auto rt = runtime_with(1);
  arbor::asio::Context ctx(*rt);
  EXPECT_EQ(ctx.outstanding_work(), 0);
  std::optional tracked(net::prefer(ctx.get_executor(), net::execution::outstanding_work.tracked));
  EXPECT_EQ(net::query(*tracked, net::execution::outstanding_work),
            net::execution::outstanding_work.tracked);
  EXPECT_EQ(ctx.outstanding_work(), 1);
  auto copy = *tracked;  // a copy of a tracked executor is work too
  EXPECT_EQ(ctx.outstanding_work(), 2);
  // A queued handler counts until it has run: hold the only worker in one.
  std::latch hold(1);
  net::post(ctx, [&] { hold.wait(); });
  EXPECT_GE(ctx.outstanding_work(), 3);
  std::atomic<bool> released{false};
  std::atomic<bool> released_when_idle{false};
  std::thread waiter([&] {
    ctx.wait_idle();
    released_when_idle = released.load();
  });
  hold.count_down();
  { auto gone = std::move(copy); }
  released = true;
  tracked.reset();  // the last work: wait_idle may return now, not before
  waiter.join();
  EXPECT_TRUE(released_when_idle.load());
  EXPECT_EQ(ctx.outstanding_work(), 0);
}

TEST(AsioExecutor, ExecutorSatisfiesTheStandardExecutorProperties) {
  auto rt = runtime_with(1);
  arbor::asio::Context ctx(*rt);
  auto ex = ctx.get_executor();
  static_assert(net::execution::is_executor<decltype(ex)>::value);
  EXPECT_EQ(&net::query(ex, net::execution::context), &ctx);
  EXPECT_EQ(net::query(ex, net::execution::blocking), net::execution::blocking.possibly);
  auto never = net::require(ex, net::execution::blocking.never);
  EXPECT_EQ(net::query(never, net::execution::blocking), net::execution::blocking.never);
  auto cont = net::prefer(ex, net::execution::relationship.continuation);
  EXPECT_EQ(net::query(cont, net::execution::relationship),
            net::execution::relationship.continuation);
  EXPECT_EQ(net::query(ex, net::execution::mapping), net::execution::mapping.thread);
  auto alloc = net::require(ex, net::execution::allocator(std::allocator<int>()));
  EXPECT_EQ(net::query(alloc, net::execution::allocator), std::allocator<int>());
  net::any_io_executor any = ex;  // what Asio's I/O objects hold
  EXPECT_TRUE(any == net::any_io_executor(ex));
  EXPECT_FALSE(ex.running_in_this_thread());
  std::promise<bool> in;
  net::post(never, [&] { in.set_value(never.running_in_this_thread()); });
  EXPECT_TRUE(in.get_future().get());
  ctx.wait_idle();
}

TEST(AsioExecutor, HandlersQueuedWhenTheRuntimeStopsAreDestroyedWithoutBeingCalled) {
  // epoll polled by the workers: its stop does not wait for each worker to close a ring of
  // its own (io_uring's rings mode would wait for the worker this test holds).
  arbor::RuntimeOptions o;
  o.scheduler.workers = 1;
  o.engine = arbor::test::engine_options("epoll");
  auto rt = std::move(arbor::Runtime::create(o).value());
  arbor::asio::Context ctx(*rt);
  std::atomic<int> calls{0};
  std::atomic<int> destroyed{0};
  std::latch running(1);
  std::latch release(1);
  net::post(ctx, [&] {
    running.count_down();
    release.wait();
  });
  running.wait();  // the only worker is held: what follows stays queued
  constexpr int kQueued = 100;
  for (int i = 0; i < kQueued; ++i)
    net::post(ctx, Counted(&calls, &destroyed));
  std::thread stopper([&] { rt->shutdown(); });
  while (!rt->scheduler().stopping())  // stopping is set before the held item may return
    std::this_thread::yield();
  release.count_down();
  stopper.join();
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(destroyed.load(), kQueued);
  EXPECT_EQ(ctx.outstanding_work(), 0);
  // Posting after the stop destroys at once, never calls.
  net::post(ctx, Counted(&calls, &destroyed));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(destroyed.load(), kQueued + 1);
}

TEST(AsioExecutor, HandlersQueuedWhenTheContextGoesAreDestroyedWithoutBeingCalled) {
  auto rt = runtime_with(1);
  std::atomic<int> calls{0};
  std::atomic<int> destroyed{0};
  std::latch running(1);
  std::latch release(1);
  constexpr int kQueued = 50;
  {
    arbor::asio::Context ctx(*rt);
    net::post(ctx, [&] {  // touches nothing of the context
      running.count_down();
      release.wait();
    });
    running.wait();
    for (int i = 0; i < kQueued; ++i)
      net::post(ctx, Counted(&calls, &destroyed));
  }  // the Context goes with its handlers still queued behind the held one
  release.count_down();
  for (int seen = destroyed.load(); seen < kQueued; seen = destroyed.load())
    destroyed.wait(seen);
  EXPECT_EQ(calls.load(), 0);
}

// --- use_task, cancel_with, co_spawn ---

arbor::Task<arbor::Result<void>> wait_timer(net::steady_timer& timer) {
  auto r = co_await timer.async_wait(arbor::asio::use_task);
  co_return r;
}

TEST(AsioUseTask, ATimerAwaitedInATaskCompletesOnAWorker) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  net::steady_timer timer(ctx);
  timer.expires_after(5ms);
  const auto start = std::chrono::steady_clock::now();
  auto r = rt->block_on(wait_timer(timer));
  EXPECT_TRUE(r) << r.error().message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 5ms);
}

arbor::Task<arbor::Result<void>> connect_to(arbor::asio::Context& ctx, net::ip::tcp::endpoint at) {
  net::ip::tcp::socket socket(ctx);
  auto r = co_await socket.async_connect(at, arbor::asio::use_task);
  co_return r;
}

TEST(AsioUseTask, AnErrorBecomesTheResultsError) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  // A port nobody listens on: bound, then closed.
  net::ip::tcp::endpoint at;
  {
    net::io_context io;
    net::ip::tcp::acceptor a(io, {net::ip::address_v4::loopback(), 0});
    at = a.local_endpoint();
  }
  auto r = rt->block_on(connect_to(ctx, at));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::connection_refused) << r.error().message();
}

arbor::Task<arbor::Result<void>> wait_recorded(net::steady_timer& timer,
                                               arbor::Result<void>& inner) {
  inner = co_await timer.async_wait(arbor::asio::cancel_with(timer));
  co_return inner;
}

arbor::Task<arbor::Result<void>> wait_with_timeout(net::steady_timer& timer,
                                                   arbor::Result<void>& inner) {
  auto r = co_await arbor::with_timeout(20ms, wait_recorded(timer, inner));
  co_return r;
}

TEST(AsioCancelWith, WithTimeoutCancelsTheOperationOnItsObject) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  net::steady_timer timer(ctx);
  timer.expires_after(1h);
  arbor::Result<void> inner;
  const auto start = std::chrono::steady_clock::now();
  auto r = rt->block_on(wait_with_timeout(timer, inner));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::timed_out);
  ASSERT_FALSE(inner);  // the wait itself ended: aborted by timer.cancel()
  EXPECT_EQ(inner.error(), std::errc::operation_canceled) << inner.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  ctx.wait_idle();  // nothing left behind: no handler, no posted cancel
}

TEST(AsioCancelWith, AnOperationThatEndsFirstIsNotCancelled) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  net::steady_timer timer(ctx);
  timer.expires_after(1ms);
  arbor::Result<void> inner = std::make_error_code(std::errc::io_error);
  auto r = rt->block_on(wait_with_timeout(timer, inner));  // 20 ms deadline, 1 ms timer
  EXPECT_TRUE(r) << r.error().message();
  EXPECT_TRUE(inner);
}

TEST(AsioCancelWith, AnAbortedTaskCancelsItsPendingOperation) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  net::steady_timer timer(ctx);
  timer.expires_after(1h);
  arbor::Result<void> inner;
  auto handle = rt->spawn_abortable(wait_recorded(timer, inner));
  // Abort once the wait is pending: the timer's pending operation holds work on the context.
  while (ctx.outstanding_work() == 0)
    std::this_thread::yield();
  handle.abort();
  auto r = handle.join_blocking();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::operation_canceled) << r.error().message();
  ctx.wait_idle();
}

TEST(AsioCancelWith, AnAlreadyStoppedTaskStartsNothing) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  net::steady_timer timer(ctx);
  timer.expires_after(1h);
  arbor::Result<void> inner;
  arbor::TaskContext stopped{rt.get(), std::stop_token{}, false};
  std::stop_source source;
  source.request_stop();
  stopped.token = source.get_token();
  auto r = rt->spawn_in(wait_recorded(timer, inner), &stopped).join_blocking();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::operation_canceled);
  EXPECT_EQ(timer.cancel(), 0u);  // no wait was ever started on it
}

net::awaitable<int> add_after_a_timer(int a, int b) {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer timer(ex, 1ms);
  co_await timer.async_wait(net::use_awaitable);
  co_return a + b;
}

arbor::Task<int> spawn_and_await(arbor::asio::Context& ctx) {
  int sum = co_await net::co_spawn(ctx, add_after_a_timer(40, 2), arbor::asio::use_task);
  co_return sum;
}

TEST(AsioCoSpawn, AnAwaitableSpawnedOnTheContextIsAwaitedInATask) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  EXPECT_EQ(rt->block_on(spawn_and_await(ctx)), 42);
  // And on its own, detached, with a plain callback completion.
  std::promise<std::pair<bool, int>> done;
  net::co_spawn(ctx, add_after_a_timer(1, 2), [&](std::exception_ptr e, int v) {
    done.set_value({e == nullptr && on_worker(*rt), v});
  });
  EXPECT_EQ(done.get_future().get(), std::make_pair(true, 3));
  ctx.wait_idle();
}

}  // namespace
