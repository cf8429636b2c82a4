// Engine-level tests, run against every engine this machine can create.
#include "arbor/io/engine.hpp"

#include <gtest/gtest.h>

#if defined(__linux__)
#include <fcntl.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <memory>
#include <string_view>
#include <vector>

#include "../runtime/runtime_support.hpp"
#include "../sched/test_support.hpp"
#include "arbor/io/socket.hpp"
#include "engine_test_support.hpp"

namespace arbor::io {
namespace {

using sched::test::Countdown;
using test::Receive;
using test::Timed;

// Each engine twice: in its default io mode (the parameter is its name), and with dedicated
// pollers ("<name>-pollers"), whose rings and epoll sets are set up and driven differently (an
// io_uring poller's ring is single-issuer with deferred task work); and io_uring a third time
// with a ring per worker ("uring-rings"), on a scheduler with per-worker parking, where each
// worker submits to, reaps and delivers from its own ring.
class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr std::string_view kPollers = "-pollers";
  static constexpr std::string_view kRings = "-rings";
  static bool pollers() { return GetParam().ends_with(kPollers); }
  static bool rings() { return GetParam().ends_with(kRings); }
  static std::string kind() {
    if (pollers()) return GetParam().substr(0, GetParam().size() - kPollers.size());
    if (rings()) return GetParam().substr(0, GetParam().size() - kRings.size());
    return GetParam();
  }
  /// Scheduler options for this test's io mode: `workers` workers, parking per worker for the
  /// rings variant (runtime_support.hpp's helper, which the runtime suites use too).
  static sched::SchedulerOptions scheduler_options(int workers) {
    return arbor::test::scheduler_options(GetParam(), {.workers = workers});
  }
  /// An engine of this test's kind and io mode, unless `o` names a mode itself.
  std::unique_ptr<Engine> make(sched::Scheduler& scheduler, EngineOptions o) {
    o.kind = kind();
    if (pollers() && !o.io_mode) o.io_mode = IoMode::pollers;
    if (rings() && !o.io_mode) o.io_mode = IoMode::rings;
    auto engine = Engine::create(scheduler, o);
    EXPECT_TRUE(engine) << engine.error().message();
    return engine ? std::move(*engine) : nullptr;
  }
};

// Every engine in its default mode and with pollers; io_uring also with a ring per worker.
std::vector<std::string> engines_in_both_modes() {
  std::vector<std::string> params;
  for (const std::string& name : Engine::available()) {
    params.push_back(name);
    params.push_back(name + "-pollers");
    if (name == "uring") params.push_back(name + "-rings");
  }
  return params;
}

// A burst of 1,000 ready completions: each delivered exactly once, in batches of at most K
// per wait, as trees of at most B (the engine counts trees; a tree never exceeds B, so a batch
// of n events makes at least ceil(n / B) of them).
TEST_P(EngineTest, BurstIsDeliveredAsBoundedTreesExactlyOnce) {
  constexpr std::size_t kPairs = 1000, kBatch = 64, kTree = 8;
  sched::Scheduler scheduler(scheduler_options(2));
  EngineOptions o;
  o.max_batch = kBatch;
  o.max_tree = kTree;
  auto engine = make(scheduler, o);
  ASSERT_TRUE(engine);

  std::vector<Handle> writers(kPairs);
  std::vector<DescriptorRef> readers(kPairs);
  std::vector<Receive> ops(kPairs);
  Countdown done(kPairs);
  for (std::size_t i = 0; i < kPairs; ++i) {
    Handle fds[2];
    ASSERT_TRUE(test::stream_pair(fds));
    writers[i] = fds[1];
    auto d = engine->attach(fds[0]);
    ASSERT_TRUE(d);
    readers[i] = *d;
    ops[i].prepare(*d, done);
    ASSERT_FALSE(engine->start(ops[i])) << "nothing to read yet: must be pending";
  }
  const auto before = engine->counters();
  for (std::size_t i = 0; i < kPairs; ++i) {
    const char c = static_cast<char>('a' + i % 26);
    ASSERT_TRUE(test::send_byte(writers[i], c));
  }
  ASSERT_TRUE(done.wait());
  for (std::size_t i = 0; i < kPairs; ++i) {
    EXPECT_EQ(ops[i].completions.load(), 1) << i;
    EXPECT_EQ(ops[i].last.load(), 1) << i;
    EXPECT_EQ(static_cast<char>(ops[i].byte), static_cast<char>('a' + i % 26));
  }
  for (std::size_t i = 0; i < kPairs; ++i) {
    engine->close(readers[i]);
    test::close_peer(writers[i]);
  }
  // Counted once polling has stopped: deliver() counts a batch's events before it submits the
  // trees and the trees after, so the last completion can run before its tree is counted.
  engine->stop();
  const auto after = engine->counters();
  const std::uint64_t events = after.events - before.events;
  const std::uint64_t trees = after.trees - before.trees;
  EXPECT_GE(events, kPairs);
  EXPECT_LE(after.largest_batch, kBatch);
  EXPECT_GE(trees * kTree, events);
  EXPECT_GE(trees, kPairs / kBatch);  // more than one batch, more than one tree per batch
  scheduler.stop();
}

TEST_P(EngineTest, TimersFireNotBeforeTheirDeadlineAndCancelledOnesReportCancel) {
  sched::Scheduler scheduler(scheduler_options(2));
  auto engine = make(scheduler, {});
  ASSERT_TRUE(engine);
  std::vector<Timed> timers(200);
  Countdown done(static_cast<std::uint32_t>(timers.size()));
  const std::int64_t start = now_ns();
  for (std::size_t i = 0; i < timers.size(); ++i) {
    timers[i].deadline_ns = start + static_cast<std::int64_t>((i % 20) * 1'000'000);
    timers[i].handler = &Timed::on_event;
    timers[i].done = &done;
    ASSERT_TRUE(engine->add_timer(timers[i]));
  }
  for (std::size_t i = 1; i < timers.size(); i += 10)
    engine->cancel_timer(timers[i]);
  ASSERT_TRUE(done.wait());
  for (std::size_t i = 0; i < timers.size(); ++i) {
    EXPECT_EQ(timers[i].fired.load(), 1);
    if (timers[i].result == 0) {
      EXPECT_GE(timers[i].at.load(), timers[i].deadline_ns) << "fired early";
    } else {
      EXPECT_EQ(timers[i].result.load(), -ECANCELED);
      EXPECT_EQ(i % 10, 1u);
    }
  }
  engine->stop();
  scheduler.stop();
}

TEST_P(EngineTest, CancelCompletesAPendingReceiveOnce) {
  sched::Scheduler scheduler(scheduler_options(1));
  auto engine = make(scheduler, {});
  ASSERT_TRUE(engine);
  Handle fds[2];
  ASSERT_TRUE(test::stream_pair(fds));
  auto d = engine->attach(fds[0]);
  ASSERT_TRUE(d);
  Countdown done(1);
  Receive op;
  op.prepare(*d, done);
  ASSERT_FALSE(engine->start(op));
  engine->cancel(op);
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(op.last.load(), -ECANCELED);
  engine->cancel(op);  // a second cancel after completion is harmless
  EXPECT_EQ(op.completions.load(), 1);
  engine->close(*d);
  test::close_peer(fds[1]);
  engine->stop();
  scheduler.stop();
}

TEST_P(EngineTest, CancelAllCancelsPendingWorkAndRefusesLaterWork) {
  sched::Scheduler scheduler(scheduler_options(1));
  auto engine = make(scheduler, {});
  ASSERT_TRUE(engine);
  Handle fds[2];
  ASSERT_TRUE(test::stream_pair(fds));
  auto d = engine->attach(fds[0]);
  ASSERT_TRUE(d);
  Countdown done(2);
  Receive op;
  op.prepare(*d, done);
  ASSERT_FALSE(engine->start(op));
  Timed timer;
  timer.deadline_ns = now_ns() + 3'600'000'000'000;  // an hour: only cancellation ends it
  timer.handler = &Timed::on_event;
  timer.done = &done;
  ASSERT_TRUE(engine->add_timer(timer));
  engine->cancel_all();
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(op.last.load(), -ECANCELED);
  EXPECT_EQ(timer.result.load(), -ECANCELED);
  // Later work is refused at once, even with data ready.
  ASSERT_TRUE(test::send_byte(fds[1], 'x'));
  Receive later;
  Countdown unused(1);
  later.prepare(*d, unused);
  EXPECT_TRUE(engine->start(later));
  EXPECT_EQ(later.result, -ECANCELED);
  Timed later_timer;
  later_timer.handler = &Timed::on_event;
  EXPECT_FALSE(engine->add_timer(later_timer));
  engine->close(*d);
  test::close_peer(fds[1]);
  engine->stop();
  scheduler.stop();
}

// The poller is whoever reaped the completion: a poller thread, the worker holding the poll
// right, or (rings) the worker that owns the socket's ring; never the scheduler's queues.
TEST_P(EngineTest, InlineModeRunsCompletionsOnThePoller) {
  sched::Scheduler scheduler(scheduler_options(1));
  EngineOptions o;
  o.inline_completions = true;
  auto engine = make(scheduler, o);
  ASSERT_TRUE(engine);
  Handle fds[2];
  ASSERT_TRUE(test::stream_pair(fds));
  auto d = engine->attach(fds[0]);
  ASSERT_TRUE(d);
  Countdown done(1);
  Receive op;
  op.prepare(*d, done);
  ASSERT_FALSE(engine->start(op));
  ASSERT_TRUE(test::send_byte(fds[1], 'x'));
  ASSERT_TRUE(done.wait());
  EXPECT_EQ(op.last.load(), 1);
  EXPECT_EQ(engine->counters().trees, 0u);  // nothing went through the scheduler
  engine->close(*d);
  test::close_peer(fds[1]);
  engine->stop();
  scheduler.stop();
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineTest, ::testing::ValuesIn(engines_in_both_modes()),
                         [](const auto& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(EngineOptions, RejectsUnknownNamesAndBadRanges) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  EngineOptions o;
  o.kind = "kqueue-on-linux";
  auto e = Engine::create(scheduler, o);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error(), std::errc::invalid_argument);
  o.kind = Engine::names().front();
  o.max_tree = 0;
  EXPECT_FALSE(Engine::create(scheduler, o));
  o.max_tree = 16;
  o.pollers = 0;
  EXPECT_FALSE(Engine::create(scheduler, o));
  scheduler.stop();
}

TEST(EngineOptions, FromEnvironment) {
  const std::string engine = Engine::names().front();
  test::set_env("ARBOR_ENGINE", engine.c_str());
  test::set_env("ARBOR_POLLERS", "2");
  test::set_env("ARBOR_MAX_TREE", "4");
  auto o = EngineOptions::from_env();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, engine);
  EXPECT_EQ(o->pollers, 2);
  EXPECT_EQ(o->max_tree, 4u);
  test::set_env("ARBOR_ENGINE", "nope");
  EXPECT_FALSE(EngineOptions::from_env());
  test::set_env("ARBOR_ENGINE", "auto");
  test::set_env("ARBOR_POLLERS", "two");
  EXPECT_FALSE(EngineOptions::from_env());
  test::unset_env("ARBOR_ENGINE");
  test::unset_env("ARBOR_POLLERS");
  test::unset_env("ARBOR_MAX_TREE");
}

TEST(EngineOptions, IoModeParsesAutoWorkersPollersRingsAndNothingElse) {
  EXPECT_EQ(*parse_io_mode("workers"), IoMode::workers);
  EXPECT_EQ(*parse_io_mode("pollers"), IoMode::pollers);
  EXPECT_EQ(*parse_io_mode("rings"), IoMode::rings);
  EXPECT_EQ(*parse_io_mode("auto"), std::nullopt);
  EXPECT_EQ(*parse_io_mode(""), std::nullopt);
  for (const char* bad : {"threads", "Workers", "worker", "auto ", "ring"}) {
    auto mode = parse_io_mode(bad);
    ASSERT_FALSE(mode) << bad;
    EXPECT_EQ(mode.error(), std::errc::invalid_argument);
  }
  test::set_env("ARBOR_IO_MODE", "pollers");
  auto o = EngineOptions::from_env(EngineOptions{.io_mode = IoMode::workers});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->io_mode, IoMode::pollers);
  test::set_env("ARBOR_IO_MODE", "auto");
  o = EngineOptions::from_env(EngineOptions{.io_mode = IoMode::workers});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->io_mode, std::nullopt);
  test::set_env("ARBOR_IO_MODE", "both");
  EXPECT_FALSE(EngineOptions::from_env());
  test::unset_env("ARBOR_IO_MODE");
}

// Unset, the io mode is the engine's own default (uring: rings; epoll: workers; iocp: pollers;
// as documented in README and docs/benchmarks.md) as far as the scheduler allows, and the
// engine's options() say which it runs in; set, it is what was asked for. On a scheduler whose
// workers park together, io_uring's default falls back to workers mode (rings need per-worker
// parking); on one built with per-worker parking (what a Runtime builds when
// default_io_mode() says rings), io_uring runs its rings and epoll a poller thread.
TEST_P(EngineTest, RunsInItsDefaultIoModeUnlessOneIsNamed) {
  const std::string engine_kind(kind());
  const IoMode own = engine_kind == "iocp"    ? IoMode::pollers
                     : engine_kind == "uring" ? IoMode::rings
                                              : IoMode::workers;
  EXPECT_EQ(Engine::default_io_mode(EngineOptions{.kind = engine_kind}), own);
  EXPECT_EQ(Engine::default_io_mode(EngineOptions{.kind = engine_kind, .io_mode = IoMode::pollers}),
            IoMode::pollers);
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  const IoMode expected = kind() == "iocp" ? IoMode::pollers : IoMode::workers;
  auto created = Engine::create(scheduler, EngineOptions{.kind = kind()});  // no mode named
  ASSERT_TRUE(created) << created.error().message();
  auto engine = std::move(*created);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->options().io_mode, expected);
  engine->stop();
  for (IoMode named : {IoMode::workers, IoMode::pollers}) {
    auto e = make(scheduler, {.io_mode = named});
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->options().io_mode, named);
    e->stop();
  }
  scheduler.stop();
  if (rings()) {
    sched::Scheduler per_worker(scheduler_options(1));
    auto e = make(per_worker, {});
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->options().io_mode, IoMode::rings);
    e->stop();
    per_worker.stop();
  }
#ifdef __linux__
  sched::Scheduler per_worker(sched::SchedulerOptions{.workers = 1, .per_worker_parking = true});
  auto on_per_worker = Engine::create(per_worker, EngineOptions{.kind = engine_kind});
  ASSERT_TRUE(on_per_worker) << on_per_worker.error().message();
  EXPECT_EQ((*on_per_worker)->options().io_mode,
            own == IoMode::rings ? IoMode::rings : IoMode::pollers);
  (*on_per_worker)->stop();
  on_per_worker->reset();
  per_worker.stop();
#endif
}

TEST(Engine, AutoPrefersUringWhenAvailable) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  auto e = Engine::create(scheduler, {});
  ASSERT_TRUE(e);
  EXPECT_EQ(std::string((*e)->name()), Engine::available().front());
  (*e)->stop();
  scheduler.stop();
}

#if defined(__linux__)
// Review: an attach that epoll refuses (a regular file: EPERM) closes the handle and returns
// the descriptor to the pool with fd_closed still false. At teardown the engine's destructor runs
// close_if_open() over every descriptor, free ones included, and closes that fd number a
// second time: by then it may belong to anything the process opened since.
TEST(EpollEngine, RefusedAttachDoesNotCloseItsFdNumberAgainAtTeardown) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  EngineOptions o;
  o.kind = "epoll";
  auto engine = Engine::create(scheduler, o);
  ASSERT_TRUE(engine);
  char path[] = "/tmp/arbor-review-XXXXXX";
  const int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ::unlink(path);
  auto refused = (*engine)->attach(file);  // epoll_ctl(ADD) on a regular file: EPERM
  ASSERT_FALSE(refused);
  // The process reuses the lowest free number: the one attach() just closed.
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const int reused = fds[0] == file ? fds[0] : (fds[1] == file ? fds[1] : -1);
  ASSERT_NE(reused, -1) << "the refused handle's number was not reused";
  (*engine)->stop();
  engine->reset();  // the engine's destructor
  EXPECT_NE(::fcntl(reused, F_GETFD), -1) << "the engine closed an fd it no longer owned";
  ::close(fds[0]);
  ::close(fds[1]);
  scheduler.stop();
}
#endif  // Linux: epoll's own test

}  // namespace
}  // namespace arbor::io
