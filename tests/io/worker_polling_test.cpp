// Engines polled by the scheduler's workers (IoMode::workers, the default), on every engine
// this machine can create, and io_uring with a ring per worker (IoMode::rings): a completion
// while every worker is busy, a timer while a worker waits in the kernel, an outside submit that
// must wake that worker, and shutdown under it.
#include <gtest/gtest.h>

#if defined(__linux__)
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/sched/scheduler.hpp"
#include "engine_test_support.hpp"

namespace arbor::io {
namespace {

using sched::test::Countdown;
using sched::test::eventually;
using sched::test::FnItem;
using sched::test::wait_or_exit;
using test::Timed;

// The parameter is an engine name (IoMode::workers), or "uring-rings": io_uring with a ring per
// worker (IoMode::rings on a scheduler with per-worker parking), where every worker waits in
// the kernel in its own ring and the same promises hold.
class WorkerPolling : public ::testing::TestWithParam<std::string> {
 protected:
  static bool rings() { return GetParam().ends_with("-rings"); }
  static std::string kind() { return rings() ? "uring" : GetParam(); }
  static IoMode io_mode() { return rings() ? IoMode::rings : IoMode::workers; }

  // A scheduler of `workers` workers driving a fresh engine of this test's kind: what every
  // test below but the last starts from. Destroyed, it stops the engine, then the scheduler, and
  // only then destroys the engine (its pool owns the items the scheduler still holds), so that
  // a test that fails half-way leaves nobody inside either.
  struct Polled {
    explicit Polled(int workers)
        : scheduler(sched::SchedulerOptions{.workers = workers, .per_worker_parking = rings()}),
          engine(make(scheduler)) {}
    ~Polled() {
      if (engine) engine->stop();
      scheduler.stop();
    }
    // The state D2 is about: every worker asleep, and so one of them in the kernel (the last
    // one to park found the poll right free, since its holder would be awake otherwise, and
    // took it). A waker must then claim the driver's sleeper and unpark the engine.
    ::testing::AssertionResult all_asleep_one_in_kernel() {
      if (eventually([&] {
            return scheduler.parked_workers() == scheduler.workers() &&
                   scheduler.counters().driver_waits > 0;
          }))
        return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure()
             << "not every worker went to sleep with one in the kernel: parked "
             << scheduler.parked_workers() << " of " << scheduler.workers() << ", driver waits "
             << scheduler.counters().driver_waits;
    }
    // Stops both, in the runtime's order.
    void stop() {
      engine->stop();
      scheduler.stop();
    }

    sched::Scheduler scheduler;
    std::unique_ptr<Engine> engine;
  };

  // A started Polled; null if its engine could not be created (reported).
  static std::unique_ptr<Polled> start(int workers) {
    auto polled = std::make_unique<Polled>(workers);
    return polled->engine ? std::move(polled) : nullptr;
  }

  static std::unique_ptr<Engine> make(sched::Scheduler& scheduler) {
    EngineOptions o;
    o.kind = kind();
    o.io_mode = io_mode();
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
};

// Catches: a completion that arrives while every worker is busy (nobody waits in the kernel)
// waiting until some worker runs out of work; here that is never, since the busy items stop
// only once the completion has run.
TEST_P(WorkerPolling, ACompletionWhileEveryWorkerIsBusyStillRuns) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    auto p = start(workers);
    ASSERT_TRUE(p);
    sched::Scheduler& scheduler = p->scheduler;
    Countdown received(1);
    test::Receive op;
    Handle fds[2];
    auto d = pending_receive(*p->engine, fds, op, received);
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
    p->engine->close(*d);
    test::close_peer(fds[1]);
    p->stop();
  }
}

#if defined(__linux__)
// Linux only: the question is io_uring's (the submitter of a request runs its completion
// work), and the test reads /proc.
// True once thread `tid` of this process sleeps (state S or D in /proc); false after `timeout`.
bool eventually_asleep(pid_t tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  return eventually([&] {
    std::ifstream stat(path);
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');  // the name, in parentheses, may hold spaces
    return close != std::string::npos && close + 2 < line.size() &&
           (line[close + 2] == 'S' || line[close + 2] == 'D');
  });
}

// Catches: a completion stranded because the worker that submitted its request sleeps outside
// the ring (here on a futex, as a worker parked on the semaphore or blocked in a handler does)
// while another worker waits in the ring for it. io_uring runs a request's completion work on
// its submitter; a ring whose set-up let that work wait for the submitter to come back by
// itself would never post this completion, and item X would wait for it for ever. Worker A
// runs X, which submits the receive itself (its flush takes the free poll right: the other
// worker is busy with Z), lets Z end and sleeps until the receive has completed; the other
// worker parks into the ring; only then does the data arrive.
TEST_P(WorkerPolling, ACompletionArrivesWhileItsSubmitterSleepsOnAFutex) {
  if (rings()) {
    GTEST_SKIP() << "the shared ring's question. With a ring per worker, a worker asleep "
                    "inside an item holds its own ring's requests and completions until it "
                    "returns (nobody else may submit to or reap a single-issuer ring): the "
                    "mode's known cost (docs/architecture.md, UringEngine)";
  }
  auto p = start(2);
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->all_asleep_one_in_kernel());
  sched::Scheduler& scheduler = p->scheduler;
  Countdown received(1), finished(2);
  test::Receive op;
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto d = p->engine->attach(fds[0]);
  ASSERT_TRUE(d) << d.error().message();
  op.prepare(*d, received);
  std::atomic<bool> z_running{false}, z_may_end{false}, pending{false}, submitted_here{false};
  std::atomic<bool> x_woken{false};
  std::atomic<pid_t> x_thread{0};
  FnItem z([&](sched::Disposition disposition) {
    if (disposition == sched::Disposition::run) {
      z_running = true;
      while (!z_may_end.load())
        std::this_thread::yield();
    }
    finished.count_down();
  });
  FnItem x([&](sched::Disposition disposition) {
    if (disposition == sched::Disposition::run) {
      const auto polls = scheduler.counters().driver_polls;
      pending = !p->engine->start(op);
      submitted_here = scheduler.counters().driver_polls > polls;
      x_thread = ::gettid();
      z_may_end = true;
      // A futex sleep, outside the ring. Longer than the test waits for the completion below:
      // a sleeper the kernel never woke would run the completion work when its own sleep timed
      // out, and the test, had it waited as long, would then pass. So the sleep must end by the
      // count, not by its timeout.
      x_woken = received.wait(std::chrono::seconds(60));
    }
    finished.count_down();
  });
  ASSERT_TRUE(scheduler.submit(z));
  ASSERT_TRUE(eventually([&] { return z_running.load(); }));
  const auto waits = scheduler.counters().driver_waits;
  ASSERT_TRUE(scheduler.submit(x));
  ASSERT_TRUE(eventually([&] { return x_thread.load() != 0; }));
  ASSERT_TRUE(pending.load()) << "nothing to read yet: the receive must be pending";
  // epoll has nothing to submit: start() registers interest with epoll_ctl at once.
  if (GetParam() == "uring") {
    EXPECT_TRUE(submitted_here.load()) << "X's worker did not submit the receive itself";
  }
  ASSERT_TRUE(eventually_asleep(x_thread.load())) << "X did not go to sleep";
  ASSERT_TRUE(eventually([&] {
    return scheduler.parked_workers() == 1 && scheduler.counters().driver_waits > waits;
  })) << "Z's worker did not park into the ring";
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  wait_or_exit(received, "a completion whose submitter sleeps on a futex");  // 20 s < 60 s
  EXPECT_EQ(op.last.load(), 1);
  wait_or_exit(finished, "items X and Z");
  EXPECT_TRUE(x_woken.load()) << "X's sleep ended by its timeout, not by the completion";
  p->engine->close(*d);
  ::close(fds[1]);
  p->stop();
}
#endif  // __linux__

// Catches: a timer added while the only worker waits in the kernel with no deadline (or an
// older, later one) being slept through: the add must shorten that wait.
TEST_P(WorkerPolling, ATimerAddedWhileAWorkerWaitsInTheKernelFires) {
  auto p = start(1);
  ASSERT_TRUE(p);
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(p->all_asleep_one_in_kernel());
    Countdown fired(1);
    Timed timer;
    timer.handler = &Timed::on_event;
    timer.done = &fired;
    timer.deadline_ns = now_ns() + 2'000'000;  // 2 ms
    ASSERT_TRUE(p->engine->add_timer(timer));
    wait_or_exit(fired, "a timer added while the worker waits in the kernel");
    EXPECT_EQ(timer.result.load(), 0);
    EXPECT_GE(timer.at.load(), timer.deadline_ns) << "fired early";
  }
  p->stop();
}

// Catches: work submitted from a thread outside the pool stranded while the only idle worker
// sleeps in the kernel (the wake went to the semaphore, where nobody sleeps).
TEST_P(WorkerPolling, AnOutsideSubmitWakesTheWorkerInTheKernel) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    auto p = start(workers);
    ASSERT_TRUE(p);
    for (int round = 0; round < 50; ++round) {
      ASSERT_TRUE(p->all_asleep_one_in_kernel());
      Countdown ran(1);
      FnItem item([&](sched::Disposition) { ran.count_down(); });
      ASSERT_TRUE(p->scheduler.submit(item));
      wait_or_exit(ran, "an outside submit while a worker waits in the kernel");
    }
    p->stop();
  }
}

// Catches: stopping the engine or the scheduler hanging while a worker waits in the kernel with
// no deadline, or the engine going away while that worker is still inside it (ASan).
TEST_P(WorkerPolling, ShutdownWhileAWorkerWaitsInTheKernel) {
  for (int round = 0; round < 20; ++round) {
    auto p = start(2);
    ASSERT_TRUE(p);
    Countdown received(1);
    test::Receive op;
    Handle fds[2];
    auto d = pending_receive(*p->engine, fds, op, received);
    ASSERT_TRUE(d);
    ASSERT_TRUE(p->all_asleep_one_in_kernel());
    Countdown stopped(1);
    std::thread stopper([&] {
      if (round % 2 == 0) {
        p->engine->cancel_all();  // the receive completes with -ECANCELED on a worker
      }
      p->engine->stop();    // detaches from the workers: nobody is inside the engine after it
      p->scheduler.stop();  // runs or drops what the engine delivered (its pool's items)
      p->engine.reset();
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
  auto p = start(2);
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->all_asleep_one_in_kernel());
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
  ASSERT_TRUE(p->engine->add_timer(a));
  ASSERT_TRUE(p->engine->add_timer(b));
  wait_or_exit(done, "the long timer handler");
  EXPECT_TRUE(a.saw_b.load()) << "timer B did not fire while the other worker ran a long item "
                                 "(the idle worker slept on the semaphore, nobody in the kernel)";
  ASSERT_TRUE(eventually([&] { return b.fired.load(); }));
  p->stop();
}

// Catches: a second workers-mode engine on a scheduler that already has one attached ending
// the process (Scheduler::attach_driver aborts) instead of Engine::create reporting an error.
// Pollers mode allowed any number of engines per scheduler; engine.hpp documents no limit.
TEST_P(WorkerPolling, ASecondEngineOnOneSchedulerIsAnErrorNotAnAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        sched::Scheduler scheduler(
            sched::SchedulerOptions{.workers = 1, .per_worker_parking = rings()});
        auto first = make(scheduler);
        EngineOptions o;
        o.kind = kind();
        o.io_mode = io_mode();
        auto second = Engine::create(scheduler, o);
        const bool refused = !second;
        if (second) (*second)->stop();
        if (first) first->stop();
        scheduler.stop();
        std::_Exit(first && refused ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

std::vector<std::string> polled_variants() {
  std::vector<std::string> names = Engine::available();
  for (std::size_t i = 0, n = names.size(); i < n; ++i)
    if (names[i] == "uring") names.push_back("uring-rings");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Engines, WorkerPolling, ::testing::ValuesIn(polled_variants()),
                         [](const auto& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace arbor::io
