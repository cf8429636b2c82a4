// Seams: engine. Where the engines meet the scheduler, the runtime's sockets and the extremes of
// their options; every test runs on each engine variant here (epoll, uring, uring-single; on
// Windows iocp, iocp-pollers) and starts with one line saying what it would catch. Sockets come
// from io/engine_test_support.hpp (a loopback TCP pair on Windows, which has no socketpair).
#include <gtest/gtest.h>

#if !defined(_WIN32)
#include <dlfcn.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../io/engine_test_support.hpp"
#include "../runtime/runtime_support.hpp"
#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/sync/futex.hpp"
#include "common/engine_core.hpp"

#if !defined(_WIN32)
namespace {

// send(2) interposed for this binary: a send on `fd` is held inside the system call until the
// test releases it, which puts a close() deterministically inside an engine's speculative send.
struct SendGate {
  std::atomic<int> fd{-1};
  std::atomic<int> state{0};  // 0 idle, 1 a send is held, 2 released
};
SendGate g_send_gate;

}  // namespace

extern "C" ssize_t send(int fd, const void* buffer, size_t length, int flags) {
  using Send = ssize_t (*)(int, const void*, size_t, int);
  static const auto real = reinterpret_cast<Send>(::dlsym(RTLD_NEXT, "send"));
  int idle = 0;
  if (fd == g_send_gate.fd.load(std::memory_order_acquire) &&
      g_send_gate.state.compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) {
    g_send_gate.state.notify_all();
    for (int s; (s = g_send_gate.state.load(std::memory_order_acquire)) != 2;)
      g_send_gate.state.wait(s, std::memory_order_acquire);
  }
  return real(fd, buffer, length, flags);
}
#endif

namespace arbor::io {
namespace {

using namespace std::chrono_literals;
using sched::test::Countdown;
using sched::test::eventually;

class EngineSeams : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> make(sched::Scheduler& scheduler, EngineOptions o = {}) {
    o = arbor::test::engine_options(GetParam(), o);
    auto engine = Engine::create(scheduler, o);
    EXPECT_TRUE(engine) << engine.error().message();
    return engine ? std::move(*engine) : nullptr;
  }
};

// A one-shot operation that records its completions and counts `done` down.
struct Op : Operation {
  std::byte byte{'o'};
  std::atomic<int> completions{0};
  std::atomic<std::int64_t> last{1};
  Countdown* done = nullptr;
  void prepare(DescriptorRef d, OpKind k, Countdown& counter) noexcept {
    target(d);
    kind = k;
    data = &byte;
    size = 1;
    complete = &on_complete;
    done = &counter;
    cancel_requested.store(false);
  }
  // Starts the operation; an inline finish counts as its completion.
  void begin(Engine& engine) noexcept {
    if (engine.start(*this)) on_complete(*this, result);
  }
  static void on_complete(Operation& op, std::int64_t r) noexcept {
    auto& self = static_cast<Op&>(op);
    self.last.store(r);
    self.completions.fetch_add(1);
    self.done->count_down();
  }
};

// A connected pair: [0] for the engine, [1] its peer. True if the system made one.
bool socket_pair(Handle (&fds)[2]) {
#if defined(_WIN32)
  return test::stream_pair(fds);
#else
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) return false;
  fds[0] = pair[0];
  fds[1] = pair[1];
  return true;
#endif
}

struct Timed : Timer {
  Countdown done{1};
  explicit Timed(std::int64_t deadline) {
    deadline_ns = deadline;
    handler = &on_event;
  }
  static void on_event(const sched::Event& e, sched::Disposition) noexcept {
    static_cast<Timed*>(static_cast<Timer*>(e.target))->done.count_down();
  }
};

// Returns once poller 0 (the only one here) has begun a wait() since this call started. Every
// wait() first takes the requests queued for its poller (io_uring), so whatever the caller
// queued before (a close) has been handled. Two timers: the first may fire from a wait that
// began before the call.
bool poller_turned(Engine& engine) {
  for (int i = 0; i < 2; ++i) {
    Timed t(now_ns());
    if (!engine.add_timer(t)) return false;
    if (!t.done.wait(10s)) {
      engine.cancel_timer(t);  // it must not stay queued once `t` is gone
      t.done.wait();
      return false;
    }
  }
  return true;
}

// Catches a wait() producing more events than its batch holds (epoll with K = 1 wrote past the
// event array: one epoll event yields a read and a write event) at every extreme of K and B.
TEST_P(EngineSeams, ExtremeBatchAndTreeBoundsWithBothSidesReadyAtOnce) {
  constexpr std::size_t kPairs = 300;  // 600 events: more than one 512-event delivery chunk
  const std::pair<std::size_t, std::size_t> bounds[] = {{1, 1},       {1, 4096}, {4096, 1},
                                                        {4096, 4096}, {2, 1},    {3, 4096}};
  for (const auto& [k, b] : bounds) {
    SCOPED_TRACE("K=" + std::to_string(k) + " B=" + std::to_string(b));
    sched::Scheduler scheduler(arbor::test::scheduler_options(GetParam(), {.workers = 2}));
    EngineOptions o;
    o.max_batch = k;
    o.max_tree = b;
    auto engine = make(scheduler, o);
    ASSERT_TRUE(engine);
    std::vector<Handle> peers(kPairs), handles(kPairs);
    std::vector<DescriptorRef> sockets(kPairs);
    std::vector<Op> reads(kPairs), writes(kPairs);
    for (std::size_t i = 0; i < kPairs; ++i) {
      Handle fds[2];
      ASSERT_TRUE(socket_pair(fds));
      test::set_send_buffer(fds[0], 4096);
      peers[i] = fds[1];
      handles[i] = fds[0];
      auto d = engine->attach(fds[0]);
      ASSERT_TRUE(d);
      sockets[i] = *d;
    }
    // Round 1, traffic: each peer writes a byte and drains its side, so the socket becomes
    // readable and writable; the read gets the byte, the write gets room.
    {
      Countdown done(2 * kPairs);
      test::fill_send_buffers(handles);
      for (std::size_t i = 0; i < kPairs; ++i) {
        reads[i].prepare(sockets[i], OpKind::receive, done);
        writes[i].prepare(sockets[i], OpKind::send, done);
        reads[i].begin(*engine);
        writes[i].begin(*engine);
      }
      for (std::size_t i = 0; i < kPairs; ++i) {
        ASSERT_TRUE(test::send_byte(peers[i], 'x'));
        test::drain_peer(peers[i]);
      }
      ASSERT_TRUE(done.wait(30s)) << done.left() << " operations never completed";
      for (std::size_t i = 0; i < kPairs; ++i) {
        EXPECT_EQ(reads[i].completions.load(), 1);
        EXPECT_EQ(reads[i].last.load(), 1);
        EXPECT_EQ(reads[i].byte, std::byte{'x'});
        EXPECT_EQ(writes[i].completions.load(), 1);
        EXPECT_EQ(writes[i].last.load(), 1);
      }
    }
    // Round 2, hang-up: both sides wait again, then the peers close; one epoll event (HUP)
    // carries both sides of every socket.
    {
      Countdown done(2 * kPairs);
      test::fill_send_buffers(handles);
      for (std::size_t i = 0; i < kPairs; ++i) {
        reads[i].prepare(sockets[i], OpKind::receive, done);
        writes[i].prepare(sockets[i], OpKind::send, done);
        reads[i].completions = writes[i].completions = 0;
        reads[i].begin(*engine);
        writes[i].begin(*engine);
      }
      for (Handle peer : peers)
        test::close_peer(peer);
      ASSERT_TRUE(done.wait(30s)) << done.left() << " operations never completed";
      for (std::size_t i = 0; i < kPairs; ++i) {
        EXPECT_EQ(reads[i].completions.load(), 1);
        EXPECT_TRUE(reads[i].last == 0 || reads[i].last == -ECONNRESET) << reads[i].last;
        EXPECT_EQ(writes[i].completions.load(), 1);
        EXPECT_TRUE(test::hang_up_send_result(writes[i].last)) << writes[i].last;
      }
    }
    EXPECT_LE(engine->counters().largest_batch, 2 * k) << "K IO events plus up to K timers";
    for (DescriptorRef d : sockets)
      engine->close(d);
    engine->stop();
    scheduler.stop();
  }
}

// Catches a close() that lands inside io_uring's speculative send being handed back to the
// poller without a wake: the socket stayed open until some unrelated wake-up.
TEST_P(EngineSeams, CloseDuringASpeculativeSendClosesTheSocketWithoutAnotherWake) {
#if defined(_WIN32)
  GTEST_SKIP() << "io_uring's speculative send, held by interposing send(2) (dlsym RTLD_NEXT): "
                  "no such interposition on Windows";
#else
  sched::Scheduler scheduler(arbor::test::scheduler_options(GetParam(), {.workers = 1}));
  auto engine = make(scheduler);
  ASSERT_TRUE(engine);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds), 0);
  auto d = engine->attach(fds[0]);
  ASSERT_TRUE(d);
  Countdown done(1);
  Op write;
  write.prepare(*d, OpKind::send, done);
  g_send_gate.state.store(0);
  g_send_gate.fd.store(fds[0]);
  std::thread sender([&] { write.begin(*engine); });
  const bool held = eventually([] { return g_send_gate.state.load() == 1; }, 10s);
  engine->close(*d);
  // The poller has now taken the close request and, the send still running, left it to the
  // sender; from here on nothing but the sender's own hand-back can wake it.
  const bool turned = held && poller_turned(*engine);
  g_send_gate.fd.store(-1);
  g_send_gate.state.store(2);
  g_send_gate.state.notify_all();
  sender.join();
  ASSERT_TRUE(held) << "the send never reached send(2)";
  ASSERT_TRUE(turned);
  ASSERT_TRUE(done.wait(10s));
  EXPECT_EQ(write.last.load(), 1) << "the send itself was not affected by the close";
  char c = 0;
  pollfd p{fds[1], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  ASSERT_EQ(::read(fds[1], &c, 1), 1);
  p.revents = 0;
  ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the socket was still open 5 s after close()";
  EXPECT_EQ(::read(fds[1], &c, 1), 0);
  EXPECT_TRUE(eventually([&] { return engine->counters().descriptors == 0; }, 5s));
  ::close(fds[1]);
  engine->stop();
  scheduler.stop();
#endif
}

// Catches an operation built for a socket that was then closed running on the next socket given
// the same (recycled) descriptor: it took that connection's bytes.
TEST_P(EngineSeams, StaleOperationNeverRunsOnTheSocketThatReusedItsDescriptor) {
  sched::Scheduler scheduler(arbor::test::scheduler_options(GetParam(), {.workers = 1}));
  auto engine = make(scheduler);
  ASSERT_TRUE(engine);
  Handle a[2], b[2];
  ASSERT_TRUE(socket_pair(a));
  ASSERT_TRUE(socket_pair(b));
  auto da = engine->attach(a[0]);
  ASSERT_TRUE(da);
  Countdown stale_done(1);
  Op stale;
  stale.prepare(*da, OpKind::receive, stale_done);
  engine->close(*da);
  ASSERT_TRUE(poller_turned(*engine));  // io_uring closes and recycles on the poller
  auto db = engine->attach(b[0]);
  ASSERT_TRUE(db);
  ASSERT_EQ(db->descriptor, da->descriptor) << "the pool is LIFO: B must reuse A's descriptor";
  EXPECT_NE(db->generation, da->generation);
  ASSERT_TRUE(test::send_byte(b[1], 'B'));
  stale.begin(*engine);
  const bool finished = stale_done.wait(5s);
  if (!finished) engine->close(*db);  // it sits in B's slot; closing B ends it
  ASSERT_TRUE(finished) << "the stale read hung on B's socket";
  EXPECT_EQ(stale.last.load(), -ECANCELED) << "the stale read ran on B's socket";
  EXPECT_EQ(stale.byte, std::byte{'o'}) << "and took B's byte";
  Countdown own_done(1);
  Op own;
  own.prepare(*db, OpKind::receive, own_done);
  own.begin(*engine);
  if (!own_done.wait(5s)) {
    engine->close(*db);  // its byte is gone: end the read before `own` goes
    own_done.wait();
  }
  EXPECT_EQ(own.last.load(), 1);
  EXPECT_EQ(own.byte, std::byte{'B'}) << "B's byte is B's";
  engine->close(*db);
  test::close_peer(a[1]);
  test::close_peer(b[1]);
  engine->stop();
  scheduler.stop();
}

// Awaits an awaiter that lives elsewhere (GCC 12 copies an lvalue operand of co_await, and the
// socket awaiters cannot be copied).
template <class A>
struct AwaitInPlace {
  A& awaiter;
  bool await_ready() { return awaiter.await_ready(); }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) {
    return awaiter.await_suspend(h);
  }
  auto await_resume() { return awaiter.await_resume(); }
};
// Spelled out: clang before 17 does not deduce an aggregate's template arguments (P1816).
template <class A>
AwaitInPlace(A&) -> AwaitInPlace<A>;

// Catches the same race through the public API: a TcpStream read built before close() ran on
// the connection that reused the stream's descriptor.
TEST_P(EngineSeams, StaleTcpStreamReadIsCancelledInsteadOfReadingTheNextConnection) {
  auto rt = arbor::test::make_runtime(GetParam());
  ASSERT_TRUE(rt);
  auto listener = TcpListener::bind(*rt, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  const Address address = *listener->local_address();
  // The client attaches first (connect attaches before it connects), then the accepted side.
  auto connect = [&]() -> Task<Result<std::pair<TcpStream, TcpStream>>> {
    auto accepted = rt->spawn(listener->accept());
    auto client = co_await TcpStream::connect(*rt, address);
    auto server = co_await std::move(accepted);
    if (!client) co_return client.error();
    if (!server) co_return server.error();
    co_return std::pair{std::move(*client), std::move(*server)};
  };
  auto a = rt->block_on(connect());
  ASSERT_TRUE(a);
  std::byte buffer[8]{};
  auto stale = a->first.read_some(buffer);
  const auto attached = rt->engine().counters().descriptors;
  a->first.close();
  // With a ring per worker the timers may fire on another ring than the close's: wait for the
  // close itself (uring counts it once the descriptor is free again).
  ASSERT_TRUE(eventually([&] { return rt->engine().counters().descriptors < attached; }));
  ASSERT_TRUE(poller_turned(rt->engine()));
  auto b = rt->block_on(connect());
  ASSERT_TRUE(b);
  {
    std::byte other[1];
    auto probe = b->first.read_some(other);
    ASSERT_EQ(probe.operation().descriptor, stale.operation().descriptor)
        << "B's client must reuse A's descriptor";
  }
  const std::byte message[] = {std::byte{'B'}};
  ASSERT_TRUE(rt->block_on(b->second.write_all(message)));
  std::atomic<std::int64_t> got{1};
  Countdown done(1);
  auto await_stale = [&]() -> Task<void> {
    auto r = co_await AwaitInPlace{stale};
    got.store(r ? static_cast<std::int64_t>(*r) : -r.error().value());
    done.count_down();
  };
  auto joined = rt->spawn(await_stale());
  const bool finished = done.wait(5s);
  if (!finished) b->first.close();  // it sits in B's slot; closing B ends it
  joined.join_blocking();
  ASSERT_TRUE(finished) << "the stale read hung on B's connection";
  ASSERT_EQ(got.load(), -ECANCELED) << "the stale read got B's bytes";
  std::byte own[1]{};
  ASSERT_TRUE(rt->block_on(b->first.read_exact(own)));
  EXPECT_EQ(own[0], std::byte{'B'});
}

// One side of a ping-pong: each completed receive sends a byte to the peer and receives again,
// so a pair keeps one byte, and one completion, in flight until `stopping`.
struct Player : Operation {
  Engine* engine = nullptr;
  Handle fd = kInvalidHandle;
  std::byte byte{};
  std::atomic<bool>* stopping = nullptr;
  std::atomic<std::uint64_t>* completions = nullptr;
  Countdown* finished = nullptr;
  static void on_complete(Operation& op, std::int64_t r) noexcept {
    auto& self = static_cast<Player&>(op);
    for (;;) {
      self.completions->fetch_add(1, std::memory_order_relaxed);
      if (r != 1 || self.stopping->load(std::memory_order_acquire)) {
        self.finished->count_down();
        return;
      }
      test::send_byte_now(self.fd, 'x');
      if (!self.engine->start(self)) return;
      r = self.result;
    }
  }
};

// Catches poller 0 skipping expired timers whenever a wait filled its batch: with K = 1 under
// load a 10 ms timer had not fired after seconds.
TEST_P(EngineSeams, TimerFiresWhileEveryWaitFillsItsBatch) {
  constexpr std::size_t kPairs = 32;
  for (const bool inline_completions : {false, true}) {
    SCOPED_TRACE(inline_completions ? "inline completions" : "completions on workers");
    sched::Scheduler scheduler(arbor::test::scheduler_options(GetParam(), {.workers = 2}));
    EngineOptions o;
    o.max_batch = 1;
    o.inline_completions = inline_completions;
    auto engine = make(scheduler, o);
    ASSERT_TRUE(engine);
    std::atomic<bool> stopping{false};
    std::atomic<std::uint64_t> completions{0};
    Countdown finished(2 * kPairs);
    std::vector<Player> players(2 * kPairs);
    std::vector<DescriptorRef> sockets;
    std::vector<Handle> kick;
    for (std::size_t i = 0; i < kPairs; ++i) {
      Handle fds[2];
      ASSERT_TRUE(socket_pair(fds));
      for (int s = 0; s < 2; ++s) {
        auto d = engine->attach(fds[s]);
        ASSERT_TRUE(d);
        sockets.push_back(*d);
        Player& p = players[2 * i + s];
        p.engine = engine.get();
        p.fd = fds[s];
        p.target(*d);
        p.kind = OpKind::receive;
        p.data = &p.byte;
        p.size = 1;
        p.complete = &Player::on_complete;
        p.stopping = &stopping;
        p.completions = &completions;
        p.finished = &finished;
        ASSERT_FALSE(engine->start(p)) << "nothing to read yet";
      }
      kick.push_back(fds[0]);
    }
    for (Handle fd : kick)
      ASSERT_TRUE(test::send_byte_now(fd, 'x'));
    ASSERT_TRUE(eventually([&] { return completions.load() >= 20'000; }, 30s))
        << "the load never got going";
    Timed timer(now_ns() + 10'000'000);
    const std::uint64_t before = completions.load();
    ASSERT_TRUE(engine->add_timer(timer));
    const bool fired = timer.done.wait(2s);
    const std::uint64_t after = completions.load();
    // The load outlives the timer: it was running all along, not drained by the wait.
    const bool still_running = eventually([&] { return completions.load() > after + 100; }, 10s);
    stopping.store(true);
    engine->cancel_all();  // ends every parked receive, and the timer if it is still queued
    ASSERT_TRUE(finished.wait(30s));
    ASSERT_TRUE(timer.done.wait(10s));
    EXPECT_TRUE(fired) << "a 10 ms timer had not fired after 2 s; " << after - before
                       << " completions meanwhile";
    EXPECT_GT(after, before) << "no completions while the timer was due";
    EXPECT_TRUE(still_running) << "the load stopped";
    for (DescriptorRef d : sockets)
      engine->close(d);
    engine->stop();
    scheduler.stop();
  }
}

// Catches an engine torn down through its owner crashing because its backend's destructor did
// not stop the pollers first (~Engine then called the backend's pure virtual wake()).
TEST(EngineTeardown, ABackendThatNeverStopsItsPollersIsStoppedByItsOwner) {
  struct Minimal final : EngineCore {
    explicit Minimal(sched::Scheduler& s)
        : EngineCore(s, EngineOptions{.io_mode = IoMode::pollers}) {
      if (start_polling()) throw std::runtime_error("no poller thread");
    }
    const char* name() const noexcept override { return "minimal"; }
    Result<DescriptorRef> attach(Handle) noexcept override {
      return std::make_error_code(std::errc::not_supported);
    }
    bool start(Operation& op) noexcept override {
      op.result = -ENOTSUP;
      return true;
    }
    std::int64_t receive_now(Operation&) noexcept override { return -ENOTSUP; }
    void cancel(Operation&) noexcept override {}
    void close(DescriptorRef) noexcept override {}
    // A futex word, not a condition variable: destroying one with a waiter blocks in glibc,
    // which would turn the failure this test looks for into a hang.
    std::size_t wait(int, std::int64_t timeout_ns, std::span<sched::Event>) noexcept override {
      waits.fetch_add(1);
      std::optional<std::chrono::nanoseconds> timeout;
      if (timeout_ns >= 0) timeout = std::chrono::nanoseconds(timeout_ns);
      if (wakes.exchange(0) == 0) sync::futex_wait(wakes, 0, timeout);  // a wake is kept
      return 0;
    }
    void wake(int) noexcept override {
      wakes.store(1);
      sync::futex_wake_all(wakes);
    }
    void cancel_parked() noexcept override {}
    sync::FutexWord wakes{0};
    std::atomic<int> waits{0};
  };
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  {
    std::unique_ptr<Engine> engine(new Minimal(scheduler));
    auto& minimal = static_cast<Minimal&>(*engine);
    ASSERT_TRUE(eventually([&] { return minimal.waits.load() > 0; }, 10s));
  }  // destroyed through its owner, with its poller in wait()
  scheduler.stop();
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineSeams, ::testing::ValuesIn(arbor::test::engine_variants()),
                         arbor::test::engine_name);

}  // namespace
}  // namespace arbor::io
