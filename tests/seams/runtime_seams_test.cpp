// Seams of the runtime: what spawn, block_on, yield, with_timeout and sleep do once shutdown
// has begun; shutdown from two threads; exceptions nobody joins. Run on every engine.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "../runtime/runtime_support.hpp"
#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "arbor/internal/log.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using sched::test::Countdown;

class RuntimeSeams : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Runtime> make(std::chrono::milliseconds shutdown_timeout = 5000ms) {
    RuntimeOptions o;
    o.engine = test::engine_options(GetParam());
    o.scheduler.workers = 2;
    o.shutdown_timeout = shutdown_timeout;
    auto rt = Runtime::create(o);
    EXPECT_TRUE(rt) << rt.error().message();
    return rt ? std::move(*rt) : nullptr;
  }
};

Task<int> count_runs(std::atomic<int>& runs) {
  runs.fetch_add(1);
  co_return 42;
}

// Catches: a start refused by the stopping scheduler being dropped by submit and again by
// spawn, resuming the task twice (a crash, or the body running twice).
TEST_P(RuntimeSeams, SpawnAfterShutdownRunsTheTaskOnce) {
  auto rt = make();
  rt->shutdown();
  std::atomic<int> runs{0};
  auto h = rt->spawn(count_runs(runs));
  EXPECT_EQ(h.join_blocking(), 42);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(rt->live_tasks(), 0);
}

// Catches the same double drop through block_on.
TEST_P(RuntimeSeams, BlockOnAfterShutdownRunsTheTaskOnce) {
  auto rt = make();
  rt->shutdown();
  std::atomic<int> runs{0};
  EXPECT_EQ(rt->block_on(count_runs(runs)), 42);
  EXPECT_EQ(runs.load(), 1);
}

Task<int> yield_through_stop(Runtime& rt, std::atomic<int>& after) {
  while (!rt.scheduler().stopping())
    co_await yield();
  for (int i = 0; i < 3; ++i) {
    co_await yield();
    after.fetch_add(1);
  }
  co_return 7;
}

// Catches: co_await yield() once the scheduler is stopping, where the refused item had already
// resumed the coroutine inside await_suspend and await_suspend then resumed it again.
TEST_P(RuntimeSeams, YieldWhileTheSchedulerStops) {
  auto rt = make(50ms);  // the task ignores cancellation: shutdown gives up on it after 50 ms
  std::atomic<int> after{0};
  auto h = rt->spawn(yield_through_stop(*rt, after));
  rt->shutdown();
  EXPECT_EQ(h.join_blocking(), 7);
  EXPECT_EQ(after.load(), 3);
}

Task<int> quick() {
  co_return 5;
}

Task<int> timeout_then_count(Countdown& done, Result<int>& out) {
  out = co_await with_timeout(10ms, quick());
  done.count_down();
  co_return 0;
}

// Catches: with_timeout ignoring that the engine refused its deadline (cancel_all ran), then
// waiting forever for the deadline's delivery.
TEST_P(RuntimeSeams, WithTimeoutAfterRequestStopReturns) {
  auto rt = make();
  rt->request_stop();
  Countdown done(1);
  Result<int> out = std::make_error_code(std::errc::io_error);
  auto h = rt->spawn(timeout_then_count(done, out));
  sched::test::wait_or_exit(done, "with_timeout after request_stop()");
  h.join_blocking();
  ASSERT_TRUE(out.has_value()) << out.error().message();
  EXPECT_EQ(*out, 5);  // the task finished; the refused deadline did not fire
}

Task<Result<void>> sleep_a_while() {
  co_return co_await sleep_for(10s);
}

Task<bool> sleep_inside_timeout() {
  auto r = co_await with_timeout(20s, sleep_a_while());
  co_return !r && r.error() == std::errc::operation_canceled;
}

// Catches: a sleep started after stop began (directly, or under with_timeout's own token)
// waiting for its deadline instead of completing with operation_canceled.
TEST_P(RuntimeSeams, SleepAfterRequestStopIsCancelled) {
  auto rt = make();
  rt->request_stop();
  auto r = rt->block_on(sleep_a_while());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::operation_canceled);
  EXPECT_TRUE(rt->block_on(sleep_inside_timeout()));
}

// Catches: a second shutdown() (here the destructor's) returning while the first is still
// running, so the runtime is destroyed under it. The task ignores cancellation, which keeps
// the first shutdown busy for its 300 ms grace period.
TEST_P(RuntimeSeams, DestroyWhileAnotherThreadShutsDown) {
  auto rt = make(300ms);
  std::atomic<int> after{0};
  auto h = rt->spawn(yield_through_stop(*rt, after));
  std::thread first([&] { rt->shutdown(); });
  while (!rt->stop_token().stop_requested())
    std::this_thread::yield();
  rt.reset();  // ~Runtime: must wait for the shutdown running on `first`
  first.join();
  EXPECT_EQ(h.join_blocking(), 7);
}

// Catches: shutdown() re-entered on the thread already shutting down (a stop callback on the
// runtime's token runs inside request_stop()) waiting for itself.
TEST_P(RuntimeSeams, ShutdownReenteredFromAStopCallbackReturns) {
  auto rt = make();
  std::atomic<int> inner_returned{0};
  std::stop_callback callback(rt->stop_token(), [&]() noexcept {
    rt->shutdown();
    inner_returned.fetch_add(1);
  });
  Countdown done(1);
  std::thread t([&] {
    rt->shutdown();
    done.count_down();
  });
  sched::test::wait_or_exit(done, "shutdown() re-entered from a stop callback");
  t.join();
  EXPECT_EQ(inner_returned.load(), 1);
}

Task<void> shut_down_once_stopping(Runtime& rt, Countdown& called) {
  while (!rt.stop_token().stop_requested())
    co_await yield();
  rt.shutdown();  // on a worker, while another thread's shutdown must join this worker
  called.count_down();
}

// Catches: a task calling shutdown() while another thread shuts down, waiting for a shutdown
// that has to join the task's own worker (deadlock).
TEST_P(RuntimeSeams, ShutdownFromATaskWhileAnotherThreadShutsDown) {
  auto rt = make();
  Countdown called(1), done(1);
  rt->spawn(shut_down_once_stopping(*rt, called)).detach();
  std::thread t([&] {
    rt->shutdown();
    done.count_down();
  });
  sched::test::wait_or_exit(done, "shutdown() while a task calls shutdown() too");
  t.join();
  EXPECT_EQ(called.left(), 0u);
}

Task<int> throws_logic_error() {
  throw std::logic_error("seams: nobody joins me");
  co_return 0;
}

// Catches: an exception ending a detached task vanishing without a trace. It is logged once
// (error level, with its message) and counted; a joined one is neither.
TEST_P(RuntimeSeams, DetachedTaskExceptionIsLoggedAndCountedOnce) {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto& logger = log::logger();
  logger.sinks().push_back(sink);  // before any runtime thread exists
  const std::uint64_t before = unobserved_task_exceptions();
  {
    auto rt = make();
    EXPECT_THROW(rt->block_on(throws_logic_error()), std::logic_error);
    EXPECT_EQ(unobserved_task_exceptions(), before);
    rt->spawn(throws_logic_error()).detach();  // detached before it ends
    auto h = rt->spawn(throws_logic_error());
    while (!h.done())
      std::this_thread::yield();
    h.detach();      // detached after it ended
    rt->shutdown();  // waits for the detached task
  }
  logger.sinks().pop_back();
  EXPECT_EQ(unobserved_task_exceptions(), before + 2);
  const std::string text = captured.str();
  std::size_t count = 0;
  for (std::size_t at = 0; (at = text.find("seams: nobody joins me", at)) != std::string::npos;
       ++at)
    ++count;
  EXPECT_EQ(count, 2u) << text;
}

INSTANTIATE_TEST_SUITE_P(Engines, RuntimeSeams, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
