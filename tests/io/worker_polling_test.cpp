// Engines polled by the scheduler's workers (IoMode::workers, the default), on every engine
// this machine can create: a completion while every worker is busy, a timer while a worker
// waits in the kernel, an outside submit that must wake that worker, and shutdown under it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/io/engine.hpp"
#include "engine_test_support.hpp"

namespace arbor::io {
namespace {

using sched::test::Countdown;
using sched::test::eventually;
using sched::test::FnItem;
using sched::test::wait_or_exit;
using test::Timed;

class WorkerPolling : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> make(sched::Scheduler& scheduler) {
    EngineOptions o;
    o.kind = GetParam();
    o.io_mode = IoMode::workers;
    auto engine = Engine::create(scheduler, o);
    EXPECT_TRUE(engine) << engine.error().message();
    return engine ? std::move(*engine) : nullptr;
  }
  // A socket pair whose first end (attached) has `op`, a one-byte receive, pending; the other
  // end is fds[1]. Empty on failure (reported).
  static std::optional<DescriptorRef> pending_receive(Engine& engine, Handle (&fds)[2],
                                                      test::Receive& op, Countdown& done) {
    EXPECT_TRUE(test::stream_pair(fds));
    auto d = engine.attach(fds[0]);
    EXPECT_TRUE(d) << d.error().message();
    if (!d) return std::nullopt;
    op.prepare(*d, done);
    EXPECT_FALSE(engine.start(op)) << "nothing to read yet: must be pending";
    return *d;
  }
  // Every worker asleep, and so one of them in the kernel: the last one to park found the poll
  // right free (its holder would be awake otherwise) and took it.
  static bool all_asleep_one_in_kernel(sched::Scheduler& s) {
    return s.parked_workers() == s.workers() && s.counters().driver_waits > 0;
  }
};

// Catches: a completion that arrives while every worker is busy (nobody waits in the kernel)
// waiting until some worker runs out of work; here that is never, since the busy items stop
// only once the completion has run.
TEST_P(WorkerPolling, ACompletionWhileEveryWorkerIsBusyStillRuns) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    sched::Scheduler scheduler(sched::SchedulerOptions{.workers = workers});
    auto engine = make(scheduler);
    ASSERT_TRUE(engine);
    Countdown received(1);
    test::Receive op;
    Handle fds[2];
    auto d = pending_receive(*engine, fds, op, received);
    ASSERT_TRUE(d);

    std::atomic<int> started{0};
    std::vector<std::unique_ptr<FnItem>> busy;
    Countdown stopped(static_cast<std::uint32_t>(workers));
    for (int i = 0; i < workers; ++i) {
      auto item = std::make_unique<FnItem>(nullptr);
      FnItem* self = item.get();
      bool* first = new bool(true);
      self->body = [&, self, first](sched::Disposition disposition) {
        if (*first) {
          *first = false;
          started.fetch_add(1);
        }
        if (disposition == sched::Disposition::run && received.left() != 0) {
          sched::Scheduler::current()->submit(*self, /*prefer_local=*/true);
          return;
        }
        delete first;
        stopped.count_down();
      };
      busy.push_back(std::move(item));
    }
    for (auto& item : busy)
      ASSERT_TRUE(scheduler.submit(*item));
    ASSERT_TRUE(eventually([&] {
      return started.load() == workers && scheduler.parked_workers() == 0;
    })) << "the busy items did not occupy every worker";
    // Nobody waits in the kernel now, and the busy items never run out: only a busy worker's
    // look into the engine can reap this completion.
    ASSERT_TRUE(test::send_byte(fds[1], 'x'));
    wait_or_exit(received, "a completion while every worker is busy");
    EXPECT_EQ(op.last.load(), 1);
    wait_or_exit(stopped, "the busy items");
    engine->close(*d);
    test::close_peer(fds[1]);
    engine->stop();
    scheduler.stop();
  }
}

// Catches: a timer added while the only worker waits in the kernel with no deadline (or an
// older, later one) being slept through: the add must shorten that wait.
TEST_P(WorkerPolling, ATimerAddedWhileAWorkerWaitsInTheKernelFires) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  auto engine = make(scheduler);
  ASSERT_TRUE(engine);
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(eventually([&] { return all_asleep_one_in_kernel(scheduler); }));
    Countdown fired(1);
    Timed timer;
    timer.handler = &Timed::on_event;
    timer.done = &fired;
    timer.deadline_ns = now_ns() + 2'000'000;  // 2 ms
    ASSERT_TRUE(engine->add_timer(timer));
    wait_or_exit(fired, "a timer added while the worker waits in the kernel");
    EXPECT_EQ(timer.result.load(), 0);
    EXPECT_GE(timer.at.load(), timer.deadline_ns) << "fired early";
  }
  engine->stop();
  scheduler.stop();
}

// Catches: work submitted from a thread outside the pool stranded while the only idle worker
// sleeps in the kernel (the wake went to the semaphore, where nobody sleeps).
TEST_P(WorkerPolling, AnOutsideSubmitWakesTheWorkerInTheKernel) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    sched::Scheduler scheduler(sched::SchedulerOptions{.workers = workers});
    auto engine = make(scheduler);
    ASSERT_TRUE(engine);
    for (int round = 0; round < 50; ++round) {
      ASSERT_TRUE(eventually([&] { return all_asleep_one_in_kernel(scheduler); }));
      Countdown ran(1);
      FnItem item([&](sched::Disposition) { ran.count_down(); });
      ASSERT_TRUE(scheduler.submit(item));
      wait_or_exit(ran, "an outside submit while a worker waits in the kernel");
    }
    engine->stop();
    scheduler.stop();
  }
}

// Catches: stopping the engine or the scheduler hanging while a worker waits in the kernel with
// no deadline, or the engine going away while that worker is still inside it (ASan).
TEST_P(WorkerPolling, ShutdownWhileAWorkerWaitsInTheKernel) {
  for (int round = 0; round < 20; ++round) {
    sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 2});
    auto engine = make(scheduler);
    ASSERT_TRUE(engine);
    Countdown received(1);
    test::Receive op;
    Handle fds[2];
    auto d = pending_receive(*engine, fds, op, received);
    ASSERT_TRUE(d);
    ASSERT_TRUE(eventually([&] { return all_asleep_one_in_kernel(scheduler); }));
    Countdown stopped(1);
    std::thread stopper([&] {
      if (round % 2 == 0) {
        engine->cancel_all();  // the receive completes with -ECANCELED on a worker
      }
      engine->stop();    // detaches from the workers: nobody is inside the engine after it
      scheduler.stop();  // runs or drops what the engine delivered (its pool's items)
      engine.reset();
      stopped.count_down();
    });
    wait_or_exit(stopped, "shutdown while a worker waits in the kernel");
    stopper.join();
    if (round % 2 == 0) {
      EXPECT_EQ(received.left(), 0u);
      EXPECT_EQ(op.last.load(), -ECANCELED);
    }
    test::close_peer(fds[1]);
  }
}

// Catches: IO stranded behind one long item while another worker sleeps. The worker in the
// kernel reaps timer A, keeps it (keep_first, no surplus: no wake), releases the poll right and
// runs A for a long time; the other worker sleeps on the semaphore, and nobody is in the kernel,
// so timer B (due 20 ms later) cannot fire until A ends. In pollers mode the poller fires B and
// wakes the idle worker. Here A gives up after 3 s; B must have fired well before that.
TEST_P(WorkerPolling, AnIdleWorkerReapsWhileTheOtherRunsALongItem) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 2});
  auto engine = make(scheduler);
  ASSERT_TRUE(engine);
  ASSERT_TRUE(eventually([&] { return all_asleep_one_in_kernel(scheduler); }));
  struct Long : Timer {
    std::atomic<bool>* b_fired = nullptr;
    std::atomic<bool> saw_b{false};
    Countdown* done = nullptr;
    static void on_event(const sched::Event& e, sched::Disposition) noexcept {
      auto* self = static_cast<Long*>(static_cast<Timer*>(e.target));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (!self->b_fired->load() && std::chrono::steady_clock::now() < give_up) {
      }
      self->saw_b.store(self->b_fired->load());
      self->done->count_down();
    }
  };
  struct Flag : Timer {
    std::atomic<bool> fired{false};
    static void on_event(const sched::Event& e, sched::Disposition) noexcept {
      static_cast<Flag*>(static_cast<Timer*>(e.target))->fired.store(true);
    }
  };
  Countdown done(1);
  Flag b;
  b.handler = &Flag::on_event;
  Long a;
  a.handler = &Long::on_event;
  a.b_fired = &b.fired;
  a.done = &done;
  a.deadline_ns = now_ns() + 1'000'000;   // 1 ms
  b.deadline_ns = now_ns() + 20'000'000;  // 20 ms: after A has started running
  ASSERT_TRUE(engine->add_timer(a));
  ASSERT_TRUE(engine->add_timer(b));
  wait_or_exit(done, "the long timer handler");
  EXPECT_TRUE(a.saw_b.load()) << "timer B did not fire while the other worker ran a long item "
                                 "(the idle worker slept on the semaphore, nobody in the kernel)";
  ASSERT_TRUE(eventually([&] { return b.fired.load(); }));
  engine->stop();
  scheduler.stop();
}

// Catches: a second workers-mode engine on a scheduler that already has one attached ending
// the process (Scheduler::attach_driver aborts) instead of Engine::create reporting an error.
// Pollers mode allowed any number of engines per scheduler; engine.hpp documents no limit.
TEST_P(WorkerPolling, ASecondEngineOnOneSchedulerIsAnErrorNotAnAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
        auto first = make(scheduler);
        EngineOptions o;
        o.kind = GetParam();
        o.io_mode = IoMode::workers;
        auto second = Engine::create(scheduler, o);
        const bool refused = !second;
        if (second) (*second)->stop();
        if (first) first->stop();
        scheduler.stop();
        std::_Exit(first && refused ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(Engines, WorkerPolling, ::testing::ValuesIn(Engine::available()),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace arbor::io
