// spawn_blocking as a user sees it: results and exceptions come back to the awaiting task; the
// pool grows on demand only up to its bound and shrinks when idle; the workers' timers and
// sockets keep going while every pool thread blocks; a dropped handle or a cancelled wait
// leaves the job running; shutdown drops queued jobs and does not hang on one that never ends.
// Jobs are held by a ThreadGate (a thread-blocking gate: pool threads are not tasks), and every
// wait on the pool is on a condition, never a sleep.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"
#include "runtime_support.hpp"
#include "thread_gate.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;

using test::ThreadGate;

// Polls `done` until it holds (or 30 s pass): for states with nothing to wait on (the pool's
// thread count), the poll is the condition, not a guess at how long something takes.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The first engine available here, for the tests about the pool alone.
std::string any_engine() {
  return io::Engine::available().front();
}

RuntimeOptions options(const std::string& engine, int workers, BlockingPoolOptions blocking) {
  RuntimeOptions o;
  o.engine = test::engine_options(engine);
  o.scheduler = test::scheduler_options(engine);
  o.scheduler.workers = workers;
  o.blocking = blocking;
  return o;
}

std::unique_ptr<Runtime> make(const std::string& engine, int workers = 2,
                              BlockingPoolOptions blocking = {}) {
  auto rt = Runtime::create(options(engine, workers, blocking));
  EXPECT_TRUE(rt) << rt.error().message();
  return rt ? std::move(*rt) : nullptr;
}

class SpawnBlockingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpawnBlockingTest, TheAwaitingTaskGetsTheValue) {
  auto rt = make(GetParam());
  auto result = rt->block_on([](Runtime& runtime) -> Task<std::string> {
    co_await runtime.spawn_blocking([] {});  // void works too
    static const std::string kept = "-and-kept";
    // A reference the function returns comes back as a copy (a handle owns its value).
    std::string copy = co_await runtime.spawn_blocking([]() -> const std::string& { return kept; });
    co_return co_await runtime.spawn_blocking([] { return std::string("forty-two"); }) + copy;
  }(*rt));
  EXPECT_EQ(result, "forty-two-and-kept");
}

TEST_P(SpawnBlockingTest, TheExceptionIsRethrownAtTheAwait) {
  auto rt = make(GetParam());
  auto message = rt->block_on([](Runtime& runtime) -> Task<std::string> {
    try {
      co_await runtime.spawn_blocking([]() -> int { throw std::runtime_error("disk on fire"); });
    } catch (const std::runtime_error& e) {
      co_return e.what();
    }
    co_return "no exception";
  }(*rt));
  EXPECT_EQ(message, "disk on fire");
}

TEST_P(SpawnBlockingTest, TheAwaitingTaskResumesOnAWorkerNotOnThePoolThread) {
  auto rt = make(GetParam());
  auto same = rt->block_on([](Runtime& runtime) -> Task<bool> {
    auto pool_thread = co_await runtime.spawn_blocking([] { return std::this_thread::get_id(); });
    co_return pool_thread == std::this_thread::get_id();
  }(*rt));
  EXPECT_FALSE(same);
}

TEST(SpawnBlocking, NoThreadStartsBeforeTheFirstJob) {
  Runtime rt(options(any_engine(), 1, {}));
  EXPECT_EQ(rt.blocking_threads(), 0);
  rt.block_on([](Runtime& runtime) -> Task<> { co_await runtime.spawn_blocking([] {}); }(rt));
  EXPECT_EQ(rt.blocking_threads(), 1);
}

TEST(SpawnBlocking, ManyMoreJobsThanThreadsAllComplete) {
  Runtime rt(options(any_engine(), 2, {.max_threads = 3}));
  auto sum = rt.block_on([](Runtime& runtime) -> Task<long> {
    std::vector<BlockingHandle<int>> handles;
    for (int i = 1; i <= 200; ++i)
      handles.push_back(runtime.spawn_blocking([i] { return i; }));
    long total = 0;
    for (auto& h : handles)
      total += co_await std::move(h);
    co_return total;
  }(rt));
  EXPECT_EQ(sum, 200 * 201 / 2);
  EXPECT_LE(rt.blocking_threads(), 3);
}

TEST(SpawnBlocking, ThePoolGrowsOnlyToItsBound) {
  Runtime rt(options(any_engine(), 1, {.max_threads = 3}));
  ThreadGate gate;
  std::vector<BlockingHandle<int>> handles;
  for (int i = 0; i < 6; ++i)
    handles.push_back(rt.spawn_blocking([&gate, i] {
      gate.pass();
      return i;
    }));
  ASSERT_TRUE(gate.wait_arrived(3));
  // Threads are started inside spawn_blocking, so an unbounded pool would count 6 by now.
  EXPECT_EQ(rt.blocking_threads(), 3);
  EXPECT_EQ(gate.arrived(), 3);  // three threads, all held: nobody else can have started
  gate.open();
  auto sum = rt.block_on([](std::vector<BlockingHandle<int>> hs) -> Task<int> {
    int total = 0;
    for (auto& h : hs)
      total += co_await std::move(h);
    co_return total;
  }(std::move(handles)));
  EXPECT_EQ(sum, 0 + 1 + 2 + 3 + 4 + 5);
  EXPECT_EQ(gate.arrived(), 6);
}

TEST(SpawnBlocking, IdleThreadsExitAfterTheKeepAlive) {
  Runtime rt(options(any_engine(), 1, {.max_threads = 4, .keep_alive = 1ms}));
  ThreadGate gate;
  std::vector<BlockingHandle<void>> handles;
  for (int i = 0; i < 4; ++i)
    handles.push_back(rt.spawn_blocking([&gate] { gate.pass(); }));
  ASSERT_TRUE(gate.wait_arrived(4));
  EXPECT_EQ(rt.blocking_threads(), 4);
  gate.open();
  rt.block_on([](std::vector<BlockingHandle<void>> hs) -> Task<> {
    for (auto& h : hs)
      co_await std::move(h);
  }(std::move(handles)));
  EXPECT_TRUE(eventually([&] { return rt.blocking_threads() == 0; }));
  // And it grows again on demand.
  EXPECT_EQ(rt.block_on([](Runtime& runtime) -> Task<int> {
    co_return co_await runtime.spawn_blocking([] { return 7; });
  }(rt)),
            7);
}

// The motivation (issue 28): a worker inside a BlockingRegion starved a 10 ms ticker. Here the
// only worker stays free while every pool thread blocks: timers fire and a socket echoes.
TEST_P(SpawnBlockingTest, TimersAndSocketsKeepRunningWhileEveryPoolThreadBlocks) {
  auto rt = make(GetParam(), /*workers=*/1, {.max_threads = 4});
  ThreadGate gate;
  std::vector<BlockingHandle<void>> handles;
  for (int i = 0; i < 6; ++i)
    handles.push_back(rt->spawn_blocking([&gate] { gate.pass(); }));
  ASSERT_TRUE(gate.wait_arrived(4));
  auto served = rt->block_on([](Runtime& runtime) -> Task<Result<int>> {
    int ticks = 0;
    for (int i = 0; i < 20; ++i) {
      if (!co_await sleep_for(1ms)) co_return std::make_error_code(std::errc::io_error);
      ++ticks;
    }
    auto pair = co_await test::connected_pair(runtime);
    if (!pair) co_return pair.error();
    const std::byte ping[4] = {std::byte{'p'}, std::byte{'i'}, std::byte{'n'}, std::byte{'g'}};
    std::byte got[4];
    if (auto w = co_await pair->client.write_all(ping); !w) co_return w.error();
    if (auto r = co_await pair->server.read_exact(got); !r) co_return r.error();
    co_return ticks + (std::memcmp(got, ping, 4) == 0 ? 1 : 0);
  }(*rt));
  ASSERT_TRUE(served) << served.error().message();
  EXPECT_EQ(*served, 21);
  EXPECT_EQ(gate.arrived(), 4);  // still held, all of them, the whole time
  for (auto& h : handles)
    EXPECT_FALSE(h.done());
  gate.open();
  rt->block_on([](std::vector<BlockingHandle<void>> hs) -> Task<> {
    for (auto& h : hs)
      co_await std::move(h);
  }(std::move(handles)));
  EXPECT_EQ(gate.arrived(), 6);
}

TEST(SpawnBlocking, DroppingTheHandleDetachesTheJob) {
  Runtime rt(options(any_engine(), 1, {}));
  ThreadGate gate;
  std::atomic<bool> ran{false};
  const auto unobserved = unobserved_task_exceptions();
  {
    auto h = rt.spawn_blocking([&] {
      gate.pass();
      ran = true;
    });
    auto failing = rt.spawn_blocking([]() -> int { throw std::runtime_error("nobody looks"); });
  }  // both dropped
  gate.open();
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
  // The exception nobody took is reported once when the job goes, not lost.
  EXPECT_TRUE(eventually([&] { return unobserved_task_exceptions() == unobserved + 1; }));
}

TEST_P(SpawnBlockingTest, ACancelledWaitEndsAtOnceAndTheJobRunsOn) {
  auto rt = make(GetParam());
  ThreadGate gate;
  std::atomic<bool> finished{false};
  auto outcome = rt->block_on(
      [](Runtime& runtime, ThreadGate& g, std::atomic<bool>& done) -> Task<std::string> {
        auto job = runtime.spawn_blocking([&] {
          g.pass();
          done = true;
          return 1;
        });
        auto waited = co_await with_timeout(5ms, std::move(job));
        if (waited) co_return "completed";
        co_return waited.error() == std::errc::timed_out ? "timed out" : waited.error().message();
      }(*rt, gate, finished));
  EXPECT_EQ(outcome, "timed out");
  EXPECT_FALSE(finished);  // the gate is still shut: the job was not waited for
  gate.open();
  EXPECT_TRUE(eventually([&] { return finished.load(); }));  // its state outlived the await
}

TEST_P(SpawnBlockingTest, AbortingTheAwaitingTaskEndsTheWait) {
  auto rt = make(GetParam());
  ThreadGate gate;
  auto blocked = rt->spawn_blocking([&gate] { gate.pass(); });
  auto waiter = rt->spawn_abortable([](BlockingHandle<void> h) -> Task<std::string> {
    try {
      co_await std::move(h);
      co_return "completed";
    } catch (const std::system_error& e) {
      co_return e.code() == std::errc::operation_canceled ? "cancelled" : e.what();
    }
  }(std::move(blocked)));
  ASSERT_TRUE(gate.wait_arrived(1));
  waiter.abort();
  EXPECT_EQ(rt->block_on([](JoinHandle<std::string> w) -> Task<std::string> {
    co_return co_await std::move(w);
  }(std::move(waiter))),
            "cancelled");
  gate.open();  // the job ends after its awaiter: the last to let go frees it (asan checks)
}

TEST(SpawnBlocking, SpawnedFromOutsideAWorkerAndAwaitedInATask) {
  Runtime rt(options(any_engine(), 1, {}));
  auto h = rt.spawn_blocking([] { return 5; });  // from main: no worker, no task
  EXPECT_EQ(rt.block_on([](BlockingHandle<int> handle) -> Task<int> {
    co_return co_await std::move(handle);
  }(std::move(h))),
            5);
}

TEST(SpawnBlocking, ShutdownDropsQueuedJobsAndWaitsForRunningOnes) {
  auto rt = std::make_unique<Runtime>(options(any_engine(), 1, {.max_threads = 1}));
  ThreadGate gate;
  auto running = rt->spawn_blocking([&gate] {
    gate.pass();
    return 1;
  });
  ASSERT_TRUE(gate.wait_arrived(1));
  auto queued = rt->spawn_blocking([] { return 2; });  // the only thread is held
  std::thread stopper([&] { rt->shutdown(); });
  // Shutdown drops the queued job first (done without having run), then waits for the other.
  ASSERT_TRUE(eventually([&] { return queued.done(); }));
  EXPECT_FALSE(running.done());
  gate.open();
  stopper.join();
  EXPECT_TRUE(running.done());
  EXPECT_EQ(rt->blocking_threads(), 0);
  // Collected on another runtime: the handles outlive the one that ran the jobs.
  Runtime other(options(any_engine(), 1, {}));
  auto outcome =
      other.block_on([](BlockingHandle<int> ran, BlockingHandle<int> dropped) -> Task<std::string> {
        std::string s = std::to_string(co_await std::move(ran));
        try {
          co_await std::move(dropped);
          s += " and the queued one ran";
        } catch (const std::system_error& e) {
          if (e.code() == std::errc::operation_canceled) s += " and the queued one was dropped";
        }
        co_return s;
      }(std::move(running), std::move(queued)));
  EXPECT_EQ(outcome, "1 and the queued one was dropped");
}

TEST(SpawnBlocking, ShutdownCancelsWaitsAndAbandonsAJobPastTheTimeout) {
  auto gate = std::make_shared<ThreadGate>();  // outlives the runtime: the job still uses it
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::string outcome;
  {
    RuntimeOptions o = options(any_engine(), 1, {});
    o.shutdown_timeout = 20ms;
    Runtime rt(o);
    auto waiter = rt.spawn([](Runtime& runtime, std::shared_ptr<ThreadGate> g,
                              std::shared_ptr<std::atomic<bool>> done, std::string& out) -> Task<> {
      try {
        // Named first: a lambda capturing shared_ptrs built inside the co_await expression is
        // destroyed twice by GCC 12 (docs/guide.md's compiler note 2).
        auto job = runtime.spawn_blocking([g, done] {
          g->pass();
          *done = true;
        });
        co_await std::move(job);
        out = "completed";
      } catch (const std::system_error& e) {
        out = e.code() == std::errc::operation_canceled ? "cancelled" : e.what();
      }
    }(rt, gate, finished, outcome));
    waiter.detach();
    ASSERT_TRUE(gate->wait_arrived(1));
  }  // the destructor: cancels the wait, gives the job 20 ms, abandons it, returns
  EXPECT_EQ(outcome, "cancelled");
  EXPECT_FALSE(*finished);
  gate->open();
  EXPECT_TRUE(eventually([&] { return finished->load(); }));
}

// A job may shut its own runtime down (one that blocks reading a "quit" command, say). Its
// thread cannot wait for itself: shutdown waits for the pool's other threads only, and returns
// at once rather than after shutdown_timeout, abandoning the very job that called it.
TEST(SpawnBlocking, AJobThatShutsItsRuntimeDownDoesNotWaitForItself) {
  RuntimeOptions o = options(any_engine(), 1, {});
  o.shutdown_timeout = 20s;  // what the shutdown would take if it waited for its own thread
  Runtime rt(o);
  std::promise<void> returned;
  auto shut_down = returned.get_future();
  auto job = rt.spawn_blocking([&rt, &returned] {
    rt.shutdown();
    returned.set_value();
  });
  // Far below shutdown_timeout, far above what shutting an idle runtime down takes: a hang
  // detector, not a measurement.
  EXPECT_EQ(shut_down.wait_for(10s), std::future_status::ready);
  shut_down.wait();
}

// milliseconds::max() as shutdown_timeout (wait as long as it takes) overflowed in the waits'
// clock arithmetic to a deadline already past: shutdown abandoned the running job at once.
TEST(SpawnBlocking, AShutdownTimeoutTooLongToAddToTheClockWaitsForTheRunningJob) {
  RuntimeOptions o = options(any_engine(), 1, {.max_threads = 1});
  o.shutdown_timeout = std::chrono::milliseconds::max();
  Runtime rt(o);
  ThreadGate gate;
  std::atomic<bool> finished{false};
  auto running = rt.spawn_blocking([&] {
    gate.pass();
    finished = true;
  });
  ASSERT_TRUE(gate.wait_arrived(1));
  auto queued = rt.spawn_blocking([] {});  // dropped when shutdown reaches the pool
  std::atomic<bool> finished_at_return{false};
  std::thread stopper([&] {
    rt.shutdown();
    finished_at_return = finished.load();
  });
  ASSERT_TRUE(eventually([&] { return queued.done(); }));
  gate.open();  // only now can the job finish: a shutdown that returned before did not wait
  stopper.join();
  EXPECT_TRUE(finished_at_return) << "shutdown abandoned the job instead of waiting for it";
}

// A coroutine of another library's type awaiting a job has no task context, so no stop token:
// its wait was not cancelled at shutdown, and a job abandoned past shutdown_timeout that
// returned after the runtime was destroyed resumed it through the destroyed runtime (a use
// after free). The wait is cancelled by the job's runtime's stop instead.
struct ForeignCoroutine {
  struct promise_type {
    ForeignCoroutine get_return_object() {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }  // the test destroys it
    void return_void() noexcept {}
    void unhandled_exception() noexcept {}
  };
  std::coroutine_handle<promise_type> handle;
};

ForeignCoroutine await_from_foreign(BlockingHandle<void> job, std::string& outcome) {
  try {
    co_await std::move(job);
    outcome = "completed";
  } catch (const std::system_error& e) {
    outcome = e.code() == std::errc::operation_canceled ? "cancelled" : e.what();
  }
}

TEST(SpawnBlocking, AForeignCoroutinesWaitEndsWithTheRuntimeNotAfterIt) {
  auto gate = std::make_shared<ThreadGate>();  // outlives the runtime: the job still uses it
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::string outcome;
  ForeignCoroutine waiter;
  {
    RuntimeOptions o = options(any_engine(), 1, {});
    o.shutdown_timeout = 20ms;
    Runtime rt(o);
    auto job = rt.spawn_blocking([gate, finished] {
      gate->pass();
      *finished = true;
    });
    waiter = await_from_foreign(std::move(job), outcome);  // suspends: the job is held
    ASSERT_TRUE(gate->wait_arrived(1));
  }  // the destructor: the job is abandoned after 20 ms
  EXPECT_EQ(outcome, "cancelled");
  gate->open();  // the job returns now, with its runtime gone
  EXPECT_TRUE(eventually([&] { return finished->load(); }));
  EXPECT_TRUE(waiter.handle.done());
  waiter.handle.destroy();
}

TEST(SpawnBlocking, AJobSpawnedAfterShutdownIsDroppedNotRun) {
  Runtime rt(options(any_engine(), 1, {}));
  rt.shutdown();
  std::atomic<bool> ran{false};
  auto h = rt.spawn_blocking([&] { ran = true; });
  EXPECT_TRUE(h.done());
  EXPECT_FALSE(ran);
  EXPECT_EQ(rt.blocking_threads(), 0);
}

#if !defined(_WIN32)  // setenv
TEST(SpawnBlocking, MaxBlockingThreadsComesFromTheEnvironment) {
  ::setenv("ARBOR_MAX_BLOCKING_THREADS", "7", 1);
  auto o = RuntimeOptions::from_env();
  ::setenv("ARBOR_MAX_BLOCKING_THREADS", "0", 1);
  auto bad = RuntimeOptions::from_env();
  ::unsetenv("ARBOR_MAX_BLOCKING_THREADS");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->blocking.max_threads, 7);
  EXPECT_FALSE(bad);
}
#endif

INSTANTIATE_TEST_SUITE_P(Engines, SpawnBlockingTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
