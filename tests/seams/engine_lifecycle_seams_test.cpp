// Seams of an engine's life: cancel_all() with completions that run in place, pollers that
// cannot start, and the option extremes (64 pollers, 8-entry rings, K and B at 1 and 4096).
// Each test states what it would catch. Tests whose failure mode is a self-deadlock or an abort
// run in a death-test child with an alarm, so the failure is reported instead of hanging or
// killing the binary; on Windows (no fork, no alarm) they run in-process under a watchdog that
// ends the binary on a hang.
#include <gtest/gtest.h>

#if !defined(_WIN32)
#include <dlfcn.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <system_error>
#include <thread>

#include "../io/engine_test_support.hpp"
#include "../runtime/runtime_support.hpp"
#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "arbor/io/engine.hpp"

#if !defined(_WIN32)
namespace {
// pthread_create interposed for this binary: when armed (>= 0), that many more threads start,
// then creation fails with EAGAIN (what a pids cgroup or RLIMIT_NPROC gives).
std::atomic<int> g_threads_left{-1};
}  // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                              void* arg) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto real = reinterpret_cast<Create>(::dlsym(RTLD_NEXT, "pthread_create"));
  for (int left = g_threads_left.load(); left >= 0;) {
    if (left == 0) return EAGAIN;
    if (g_threads_left.compare_exchange_weak(left, left - 1)) break;
  }
  return real(thread, attr, start, arg);
}
#endif

namespace arbor::io {
namespace {

using namespace std::chrono_literals;

class EngineLifecycleSeams : public ::testing::TestWithParam<std::string> {
 protected:
  EngineOptions options() const { return arbor::test::engine_options(GetParam()); }
};

// A receive whose completion closes its own socket: what every task does when its read is
// cancelled (it returns, and its TcpStream's destructor closes the socket).
struct ClosingRead : Operation {
  Engine* engine = nullptr;
  DescriptorRef socket;
  std::byte byte{};
  std::atomic<int> completions{0};
  std::atomic<std::int64_t> last{1};
  static void on_complete(Operation& op, std::int64_t r) noexcept {
    auto& self = static_cast<ClosingRead&>(op);
    self.last.store(r);
    self.engine->close(self.socket);
    self.completions.fetch_add(1);
  }
};

// The scenario: 0 if it passed; 2 set-up failed, 3 the read never completed, 4 it completed
// with something else than -ECANCELED. A deadlock never returns.
int cancel_all_with_a_closing_completion(EngineOptions o) {
  sched::Scheduler scheduler(
      sched::SchedulerOptions{.workers = 1, .per_worker_parking = o.io_mode == IoMode::rings});
  o.inline_completions = true;
  auto engine = Engine::create(scheduler, o);
  if (!engine) return 2;
  Handle fds[2];
  if (!test::stream_pair(fds)) return 2;
  auto d = (*engine)->attach(fds[0]);
  if (!d) return 2;
  ClosingRead read;
  read.engine = engine->get();
  read.socket = *d;
  read.target(*d);
  read.kind = OpKind::receive;
  read.data = &read.byte;
  read.size = 1;
  read.complete = &ClosingRead::on_complete;
  if ((*engine)->start(read)) return 2;  // nothing to read: it must wait
  (*engine)->cancel_all();               // epoll: never returns
  int code = 0;
  if (!sched::test::eventually([&] { return read.completions.load() == 1; }, 5s))
    code = 3;
  else if (read.last.load() != -ECANCELED)
    code = 4;
  (*engine)->stop();
  scheduler.stop();
  test::close_peer(fds[1]);
  return code;
}

// Catches Engine::cancel_all() self-deadlocking when a cancelled operation completes in place:
// epoll's cancel_parked() delivers while it still holds the descriptor pool's mutex (it runs
// inside DescriptorPool::for_each), and a completion that closes its socket releases the
// descriptor to that same pool. Completions run in place with inline_completions, and in the
// default mode whenever the event pool cannot grow.
TEST_P(EngineLifecycleSeams, CancelAllWithACompletionThatClosesItsSocketInPlace) {
#if defined(_WIN32)
  int code = -1;
  sched::test::Countdown done(1);
  std::thread t([&] {
    code = cancel_all_with_a_closing_completion(options());
    done.count_down();
  });
  sched::test::wait_or_exit(done, "cancel_all() with a completion that closes its socket");
  t.join();
  EXPECT_EQ(code, 0) << "3: the cancelled read never completed; 4: not with -ECANCELED";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const EngineOptions base = options();
  auto scenario = [&] {
    ::alarm(10);  // a deadlock ends the child with SIGALRM
    ::_exit(cancel_all_with_a_closing_completion(base));
  };
  EXPECT_EXIT(scenario(), ::testing::ExitedWithCode(0), "")
      << "killed by SIGALRM (14) = cancel_all() deadlocked";
#endif
}

// Catches an engine whose pollers could not all start aborting the process (the backend,
// not yet owned through unique_ptr<Engine>, was destroyed with pollers still running) instead
// of Engine::create reporting the error.
TEST_P(EngineLifecycleSeams, PollerThreadCreationFailureIsAnErrorNotAnAbort) {
#if defined(_WIN32)
  GTEST_SKIP() << "it fails thread creation by interposing pthread_create (dlsym RTLD_NEXT), "
                  "which Windows' threads do not go through";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const EngineOptions base = options();
  auto scenario = [&] {
    ::alarm(10);
    sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
    EngineOptions o = base;
    o.io_mode = IoMode::pollers;  // the poller threads are what fails here
    o.pollers = 4;
    g_threads_left.store(2);  // two pollers start, the third fails
    bool failed = false;
    try {
      auto engine = Engine::create(scheduler, o);
      failed = !engine;
    } catch (const std::system_error&) {
      failed = true;
    }
    g_threads_left.store(-1);
    scheduler.stop();
    ::_exit(failed ? 0 : 5);
  };
  EXPECT_EXIT(scenario(), ::testing::ExitedWithCode(0), "")
      << "SIGABRT (6) = the engine aborted instead of reporting the failure";
#endif
}

// Catches: any engine failing at the option extremes together: 64 pollers, 8-entry rings, K and B
// at 1 and 4096; every socket has a read and a write ready at once, then a hang-up.
TEST_P(EngineLifecycleSeams, ManyPollersTinyRingsExtremeBatches) {
  using sched::test::Countdown;
  constexpr std::size_t kPairs = 200;
  for (const auto& [k, b] : {std::pair<std::size_t, std::size_t>{1, 1}, {4096, 4096}, {1, 4096}}) {
    SCOPED_TRACE("K=" + std::to_string(k) + " B=" + std::to_string(b));
    sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 2});
    EngineOptions o = options();
    o.io_mode = IoMode::pollers;
    o.pollers = 64;
    o.ring_entries = 8;
    o.max_batch = k;
    o.max_tree = b;
    auto created = Engine::create(scheduler, o);
    ASSERT_TRUE(created) << created.error().message();
    auto& engine = *created;
    struct Op1 : Operation {
      std::byte byte{'o'};
      std::atomic<std::int64_t> last{1};
      Countdown* done = nullptr;
      static void on(Operation& op, std::int64_t r) noexcept {
        auto& s = static_cast<Op1&>(op);
        s.last.store(r);
        s.done->count_down();
      }
    };
    std::vector<Handle> peers(kPairs), handles(kPairs);
    std::vector<DescriptorRef> sockets(kPairs);
    std::vector<Op1> reads(kPairs), writes(kPairs);
    Countdown done(2 * kPairs);
    for (std::size_t i = 0; i < kPairs; ++i) {
      Handle fds[2];
#if defined(_WIN32)
      ASSERT_TRUE(test::stream_pair(fds));
#else
      int pair[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair), 0);
      fds[0] = pair[0];
      fds[1] = pair[1];
#endif
      peers[i] = fds[1];
      handles[i] = fds[0];
      auto d = engine->attach(fds[0]);
      ASSERT_TRUE(d);
      sockets[i] = *d;
    }
    test::fill_send_buffers(handles);
    for (std::size_t i = 0; i < kPairs; ++i) {
      for (auto* op : {&reads[i], &writes[i]}) {
        op->target(sockets[i]);
        op->kind = op == &reads[i] ? OpKind::receive : OpKind::send;
        op->data = &op->byte;
        op->size = 1;
        op->complete = &Op1::on;
        op->done = &done;
        if (engine->start(*op)) Op1::on(*op, op->result);
      }
    }
    for (Handle p : peers)
      test::close_peer(p);
    ASSERT_TRUE(done.wait(30s)) << done.left() << " operations never completed";
    for (std::size_t i = 0; i < kPairs; ++i) {
      EXPECT_TRUE(reads[i].last == 0 || reads[i].last == -ECONNRESET) << reads[i].last;
      EXPECT_TRUE(test::hang_up_send_result(writes[i].last)) << writes[i].last;
    }
    EXPECT_LE(engine->counters().largest_batch, 2 * k);
    for (DescriptorRef d : sockets)
      engine->close(d);
    EXPECT_TRUE(sched::test::eventually([&] { return engine->counters().descriptors == 0; }, 10s));
    engine->stop();
    scheduler.stop();
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineLifecycleSeams,
                         ::testing::ValuesIn(arbor::test::engine_variants()),
                         arbor::test::engine_name);

}  // namespace
}  // namespace arbor::io
