// UringRings: io_uring's rings mode (IoMode::rings, a ring per worker), its drivers driven
// from test threads acting as the scheduler's workers: each opens its WorkerRing on its own
// thread, runs the jobs the test posts to it, waits in its ring and dispatches what it reaps
// into a real Scheduler, whose workers run the completions. So these tests need nothing of the
// scheduler's per-worker parking, only the sched::WorkerDrivers interface.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/io/clock.hpp"
#include "common/descriptor.hpp"
#include "engine_test_support.hpp"
#include "linux/uring_engine.hpp"

namespace arbor::io {
namespace {

using namespace std::chrono_literals;
using sched::test::Countdown;
using sched::test::eventually;
using sched::test::wait_or_exit;

// True once thread `tid` of this process sleeps (state S or D in /proc); false after 30 s.
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

// A thread acting as worker `index`: opens its ring, then, until stopped, runs the jobs posted
// to it and waits in its ring (no time limit) in turn; closes the ring on its way out, as a
// worker does when the drivers are detached.
class Owner {
 public:
  using Job = std::function<void(sched::WorkerDriver&)>;
  Owner(sched::WorkerDrivers& drivers, std::size_t index)
      : drivers_(drivers), index_(index), thread_([this] { run(); }) {
    wait_or_exit(opened_, "a ring's open()");
  }
  ~Owner() { stop(); }

  /// Runs `job` on this thread before its next wait; unparks it, as the scheduler would.
  void post(Job job) {
    {
      std::lock_guard guard(mutex_);
      jobs_.push_back(std::move(job));
    }
    driver_->unpark();
  }
  /// Closes the ring (on this thread) and joins it.
  void stop() {
    if (!thread_.joinable()) return;
    if (driver_ != nullptr) post([this](sched::WorkerDriver&) { stopping_ = true; });
    thread_.join();
  }
  bool opened() const { return driver_ != nullptr; }
  pid_t tid() const { return tid_; }

 private:
  void run() {
    tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
    driver_ = drivers_.open(index_);
    opened_.count_down();
    if (driver_ == nullptr) return;
    while (!stopping_) {
      for (;;) {
        Job job;
        {
          std::lock_guard guard(mutex_);
          if (jobs_.empty()) break;
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        job(*driver_);
      }
      if (stopping_) break;
      if (driver_->wait(-1)) driver_->dispatch();
    }
    drivers_.close(index_, *driver_);
  }

  sched::WorkerDrivers& drivers_;
  const std::size_t index_;
  Countdown opened_{1};
  sched::WorkerDriver* driver_ = nullptr;  // written before opened_ counts down
  std::atomic<pid_t> tid_{0};
  bool stopping_ = false;  // this thread's own
  std::mutex mutex_;
  std::deque<Job> jobs_;
  std::thread thread_;  // last: started once the rest exists
};

struct Send : Operation {
  std::atomic<int> completions{0};
  std::atomic<std::int64_t> last{0};
  Countdown* done = nullptr;
  void prepare(DescriptorRef d, const void* bytes, std::size_t n, Countdown& counter) noexcept {
    target(d);
    kind = OpKind::send;
    data = const_cast<void*>(bytes);
    size = n;
    complete = &on_complete;
    done = &counter;
  }
  static void on_complete(Operation& op, std::int64_t result) noexcept {
    auto& self = static_cast<Send&>(op);
    self.last = result;
    self.completions.fetch_add(1);
    self.done->count_down();
  }
};

struct Accept : Operation {
  std::atomic<std::int64_t> last{0};
  Countdown* done = nullptr;
  void prepare(DescriptorRef d, Countdown& counter) noexcept {
    target(d);
    kind = OpKind::accept;
    complete = &on_complete;
    done = &counter;
  }
  static void on_complete(Operation& op, std::int64_t result) noexcept {
    auto& self = static_cast<Accept&>(op);
    self.last = result;
    self.done->count_down();
  }
};

// A receive of up to 16 bytes.
struct Receive : Operation {
  char bytes[16] = {};
  std::atomic<std::int64_t> last{0};
  std::atomic<int> completions{0};
  Countdown* done = nullptr;
  void prepare(DescriptorRef d, Countdown& counter) noexcept {
    target(d);
    kind = OpKind::receive;
    data = bytes;
    size = sizeof bytes;
    complete = &on_complete;
    done = &counter;
  }
  static void on_complete(Operation& op, std::int64_t result) noexcept {
    auto& self = static_cast<Receive&>(op);
    self.last = result;
    self.completions.fetch_add(1);
    self.done->count_down();
  }
};

class UringRings : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto available = Engine::available();
    if (std::find(available.begin(), available.end(), "uring") == available.end())
      GTEST_SKIP() << "io_uring cannot run here";
  }
  void TearDown() override { stop(); }

  // A scheduler of `workers` workers, a rings-mode engine on it, and a thread acting as the
  // owner of each of its rings.
  void start(int workers, EngineOptions o = {}) {
    scheduler_ = std::make_unique<sched::Scheduler>(sched::SchedulerOptions{.workers = workers});
    o.kind = "uring";
    o.io_mode = IoMode::rings;
    auto engine = std::make_unique<uring::UringEngine>(*scheduler_, o);
    const std::error_code e = engine->init(/*attach=*/false);
    ASSERT_FALSE(e) << e.message();
    uring_ = engine.get();
    engine_ = std::move(engine);
    for (int i = 0; i < workers; ++i) {
      owners_.push_back(
          std::make_unique<Owner>(*uring_->worker_drivers(), static_cast<std::size_t>(i)));
      ASSERT_TRUE(owners_.back()->opened()) << "ring " << i << " did not open";
    }
  }
  // Closes the rings (each on its owner), then stops the engine and the scheduler.
  void stop() {
    owners_.clear();
    engine_.reset();
    if (scheduler_) scheduler_->stop();
  }
  Engine& engine() { return *engine_; }
  static int ring_of(DescriptorRef d) { return d.descriptor->poller; }
  // Attaches one end of a fresh socket pair, whose other end (never attached) goes to `peer`.
  std::optional<DescriptorRef> attach_pair(Handle& peer) {
    Handle fds[2];
    EXPECT_TRUE(test::stream_pair(fds));
    peer = fds[1];
    auto d = engine_->attach(fds[0]);
    EXPECT_TRUE(d) << d.error().message();
    if (!d) return std::nullopt;
    return *d;
  }

  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<Engine> engine_;
  uring::UringEngine* uring_ = nullptr;
  std::vector<std::unique_ptr<Owner>> owners_;
};

// A listener on 127.0.0.1 (any port); its address in `address`. -1 on failure.
int loopback_listener(sockaddr_in& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 8) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Catches: an operation lost between a thread and a ring it does not own (the request queue and
// its wake), or one started by a ring's owner that never reaches the kernel (no wake is sent
// for those: the owner must submit them itself before it sleeps); multishot accept and receive
// and single-shot ones alike.
TEST_F(UringRings, AReceiveAndSendRoundTripOverLoopback) {
  for (bool multishot : {true, false}) {
    SCOPED_TRACE(multishot ? "multishot" : "single-shot");
    EngineOptions o;
    o.multishot = multishot;
    start(2, o);
    sockaddr_in address{};
    const int listen_fd = loopback_listener(address);
    ASSERT_GE(listen_fd, 0);
    auto listener = engine().attach(listen_fd);
    ASSERT_TRUE(listener);
    const int client_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(client_fd, 0);
    ASSERT_EQ(::connect(client_fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    auto client = engine().attach(client_fd);
    ASSERT_TRUE(client);
    EXPECT_NE(ring_of(*listener), ring_of(*client)) << "sockets are spread over the rings";

    Countdown accepted(1);
    Accept accept;
    accept.prepare(*listener, accepted);
    if (engine().start(accept))
      accept.last = accept.result;  // already there: inline
    else
      wait_or_exit(accepted, "the accept");
    ASSERT_GE(accept.last.load(), 0) << "accept: " << accept.last.load();
    auto server = engine().attach(static_cast<Handle>(accept.last.load()));
    ASSERT_TRUE(server);

    // The server's receive starts on its ring's owner (its own ring: no request queue wake);
    // the client's send from the test thread.
    Countdown got_ping(1), sent_ping(1);
    Receive ping;
    ping.prepare(*server, got_ping);
    owners_[static_cast<std::size_t>(ring_of(*server))]->post([&](sched::WorkerDriver&) {
      if (engine().start(ping)) {
        ping.last = ping.result;
        got_ping.count_down();
      }
    });
    Send send_ping;
    send_ping.prepare(*client, "ping", 4, sent_ping);
    if (engine().start(send_ping)) {
      send_ping.last = send_ping.result;
      sent_ping.count_down();
    }
    wait_or_exit(sent_ping, "the ping's send");
    wait_or_exit(got_ping, "the ping's receive");
    EXPECT_EQ(send_ping.last.load(), 4);
    ASSERT_EQ(ping.last.load(), 4);
    EXPECT_EQ(std::string(ping.bytes, 4), "ping");

    // Back: the client's receive from the test thread, the server's send from its owner.
    Countdown got_pong(1), sent_pong(1);
    Receive pong;
    pong.prepare(*client, got_pong);
    if (engine().start(pong)) {
      pong.last = pong.result;
      got_pong.count_down();
    }
    Send send_pong;
    send_pong.prepare(*server, "pong", 4, sent_pong);
    owners_[static_cast<std::size_t>(ring_of(*server))]->post([&](sched::WorkerDriver&) {
      if (engine().start(send_pong)) {
        send_pong.last = send_pong.result;
        sent_pong.count_down();
      }
    });
    wait_or_exit(sent_pong, "the pong's send");
    wait_or_exit(got_pong, "the pong's receive");
    ASSERT_EQ(pong.last.load(), 4);
    EXPECT_EQ(std::string(pong.bytes, 4), "pong");

    engine().close(*server);
    engine().close(*client);
    engine().close(*listener);
    EXPECT_TRUE(eventually([&] { return engine().counters().descriptors == 0; }))
        << "every close reaches its ring and closes the fd";
    stop();
  }
}

// Catches: a completion for a ring whose owner is busy staying in the kernel until the owner
// runs out of work. With deferred task work nothing reaches the CQ until the owner enters the
// kernel, so only pending() (the SQ's TASKRUN flag, one load) can tell the busy owner to look:
// the job below looks only when pending() says so, and never sleeps in the ring.
TEST_F(UringRings, ACompletionForABusyOwnerRunsAfterItLooks) {
  for (bool multishot : {true, false}) {
    SCOPED_TRACE(multishot ? "multishot" : "single-shot");
    EngineOptions o;
    o.multishot = multishot;
    start(2, o);
    Handle peer;
    auto d = attach_pair(peer);
    ASSERT_TRUE(d);
    Owner& owner = *owners_[static_cast<std::size_t>(ring_of(*d))];
    Countdown received(1), armed(1), job_done(1);
    Receive op;
    op.prepare(*d, received);
    ASSERT_FALSE(engine().start(op)) << "nothing to read yet: must be pending";
    std::atomic<int> looks{0};
    std::atomic<bool> quiet_before{false};
    owner.post([&](sched::WorkerDriver& driver) {
      // Like a worker's look between items: submits what is queued (the receive).
      if (driver.wait(0)) driver.dispatch();
      quiet_before = !driver.pending();
      armed.count_down();
      const auto give_up = std::chrono::steady_clock::now() + 20s;
      while (received.left() != 0 && std::chrono::steady_clock::now() < give_up) {
        if (!driver.pending()) continue;
        looks.fetch_add(1);
        if (driver.wait(0)) driver.dispatch();
      }
      job_done.count_down();
    });
    wait_or_exit(armed, "the busy job's first look");
    EXPECT_TRUE(quiet_before.load()) << "pending() before anything completed";
    ASSERT_TRUE(test::send_byte(peer, 'x'));
    wait_or_exit(job_done, "the busy job");
    ASSERT_EQ(received.left(), 0u) << "the busy owner never saw its completion";
    EXPECT_EQ(op.last.load(), 1);
    EXPECT_GE(looks.load(), 1);
    engine().close(*d);
    test::close_peer(peer);
    stop();
  }
}

// Catches: a request from another thread left in the queue of an owner asleep in the kernel
// with no time limit (the Dekker pair on `incoming` and `sleeping`, and the eventfd wake).
TEST_F(UringRings, AnOutsideSubmitWakesAnOwnerWaitingInTheKernel) {
  for (bool multishot : {true, false}) {
    SCOPED_TRACE(multishot ? "multishot" : "single-shot");
    EngineOptions o;
    o.multishot = multishot;
    start(2, o);
    Handle peer;
    auto d = attach_pair(peer);
    ASSERT_TRUE(d);
    Owner& owner = *owners_[static_cast<std::size_t>(ring_of(*d))];
    ASSERT_TRUE(eventually_asleep(owner.tid()));
    ASSERT_TRUE(test::send_byte(peer, 'x'));  // there already: only the submit is missing
    const std::uint64_t wakes = engine().counters().wakes;
    Countdown received(1);
    Receive op;
    op.prepare(*d, received);
    if (engine().start(op)) {
      op.last = op.result;
      received.count_down();
    }
    wait_or_exit(received, "a receive submitted to a sleeping owner's ring");
    EXPECT_EQ(op.last.load(), 1);
    EXPECT_GT(engine().counters().wakes, wakes) << "the owner slept: it had to be woken";
    engine().close(*d);
    test::close_peer(peer);
    stop();
  }
}

// Catches: a timer late because the ring that watched the timers went off to run a long item
// while the other owner slept in the kernel without a deadline (the timer watch must move to
// the sleeper, by the holder's hand-over or by add_timer's search for one). Each owner takes a
// turn at being the busy one, with and without another timer already pending.
TEST_F(UringRings, ATimerFiresWhileOneOwnerWaitsAndTheOtherIsBusy) {
  start(2);
  for (bool other_pending : {false, true}) {
    for (std::size_t busy : {0u, 1u}) {
      SCOPED_TRACE(std::string(other_pending ? "another timer pending" : "no other timer") +
                   ", busy owner " + std::to_string(busy));
      Countdown far_done(1);
      test::Timed far;
      far.done = &far_done;
      far.handler = &test::Timed::on_event;
      far.deadline_ns = now_ns() + 3'600'000'000'000;
      if (other_pending) {
        ASSERT_TRUE(engine().add_timer(far));
      }
      ASSERT_TRUE(eventually_asleep(owners_[0]->tid()));
      ASSERT_TRUE(eventually_asleep(owners_[1]->tid()));

      Countdown fired(1), running(1), job_done(1);
      std::atomic<bool> fired_while_busy{false};
      owners_[busy]->post([&](sched::WorkerDriver&) {
        running.count_down();
        // A long item that never looks into its ring: only the other owner can fire the timer.
        fired_while_busy = fired.wait(20s);
        job_done.count_down();
      });
      wait_or_exit(running, "the long item's start");
      const std::size_t idle = 1 - busy;
      ASSERT_TRUE(eventually_asleep(owners_[idle]->tid()));
      test::Timed timer;
      timer.done = &fired;
      timer.handler = &test::Timed::on_event;
      const std::int64_t added = now_ns();
      timer.deadline_ns = added + 50'000'000;
      ASSERT_TRUE(engine().add_timer(timer));
      wait_or_exit(job_done, "the long item");
      EXPECT_TRUE(fired_while_busy.load()) << "the timer waited for the busy owner";
      // A timer that did not fire must leave the queue before it goes out of scope.
      const bool late = timer.fired.load() == 0;
      engine().cancel_timer(timer);
      if (late) wait_or_exit(fired, "the late timer's cancellation");
      EXPECT_EQ(timer.fired.load(), 1);
      EXPECT_EQ(timer.result.load(), 0);
      EXPECT_GE(timer.at.load(), timer.deadline_ns);
      if (other_pending) {
        engine().cancel_timer(far);
        wait_or_exit(far_done, "the far timer's cancellation");
        EXPECT_EQ(far.result.load(), -ECANCELED);
      }
    }
  }
}

// Catches: close() losing a pending receive (it must complete with -ECANCELED once), whether
// the close comes from another thread or from the ring's own owner.
TEST_F(UringRings, CloseWhileAReceiveIsPendingCancelsIt) {
  for (bool from_owner : {false, true}) {
    SCOPED_TRACE(from_owner ? "closed by the ring's owner" : "closed by another thread");
    start(2);
    Handle peer;
    auto d = attach_pair(peer);
    ASSERT_TRUE(d);
    Countdown received(1);
    Receive op;
    op.prepare(*d, received);
    ASSERT_FALSE(engine().start(op));
    Owner& owner = *owners_[static_cast<std::size_t>(ring_of(*d))];
    ASSERT_TRUE(eventually_asleep(owner.tid()));  // the receive is in the kernel by now
    if (from_owner)
      owner.post([&](sched::WorkerDriver&) { engine().close(*d); });
    else
      engine().close(*d);
    wait_or_exit(received, "the cancelled receive");
    EXPECT_EQ(op.last.load(), -ECANCELED);
    EXPECT_EQ(op.completions.load(), 1);
    EXPECT_TRUE(eventually([&] { return engine().counters().descriptors == 0; }));
    test::close_peer(peer);
    stop();
  }
}

// Catches: a ring closed by its worker (the drivers detached, or the worker exiting) with
// operations in the kernel: they must complete with -ECANCELED (not hang, not be freed under
// the kernel: ASan), and operations started later on its sockets must not hang either.
TEST_F(UringRings, ClosingTheDriversCancelsWhatIsInFlight) {
  for (bool multishot : {true, false}) {
    SCOPED_TRACE(multishot ? "multishot" : "single-shot");
    EngineOptions o;
    o.multishot = multishot;
    start(2, o);
    constexpr int kPairs = 4;
    Handle peers[kPairs];
    std::vector<DescriptorRef> sockets;
    Countdown received(kPairs), sent(1);
    Receive receives[kPairs];
    for (int i = 0; i < kPairs; ++i) {
      auto d = attach_pair(peers[i]);
      ASSERT_TRUE(d);
      sockets.push_back(*d);
      receives[i].prepare(*d, received);
      ASSERT_FALSE(engine().start(receives[i]));
    }
    // A send that waits for room: its peer reads nothing.
    const Handle fd = *Engine::handle(sockets[0]);
    ASSERT_TRUE(test::fill_send_buffer(fd));
    static char big[64 * 1024];
    Send send;
    send.prepare(sockets[0], big, sizeof big, sent);
    ASSERT_FALSE(engine().start(send)) << "the send buffer is full: must be pending";
    ASSERT_TRUE(eventually_asleep(owners_[0]->tid()));
    ASSERT_TRUE(eventually_asleep(owners_[1]->tid()));

    owners_.clear();  // each closes its ring on its own thread
    wait_or_exit(received, "the receives in flight");
    wait_or_exit(sent, "the send in flight");
    for (const Receive& r : receives) {
      EXPECT_EQ(r.last.load(), -ECANCELED);
      EXPECT_EQ(r.completions.load(), 1);
    }
    EXPECT_EQ(send.last.load(), -ECANCELED);

    // Later operations on sockets of closed rings: -ECANCELED, inline or soon.
    Countdown late(1);
    Receive after;
    after.prepare(sockets[1], late);
    if (engine().start(after)) {
      after.last = after.result;
      late.count_down();
    }
    wait_or_exit(late, "a receive on a closed ring's socket");
    EXPECT_EQ(after.last.load(), -ECANCELED);
    for (DescriptorRef d : sockets)
      engine().close(d);
    EXPECT_TRUE(eventually([&] { return engine().counters().descriptors == 0; }))
        << "closes on closed rings still close the fds";
    for (Handle p : peers)
      test::close_peer(p);
    stop();
  }
}

// Catches: option extremes breaking the rings: one event per wait (max_batch 1), 4096, and an
// SQ of 8 entries that fills in the middle of draining 16 sockets' requests.
TEST_F(UringRings, OptionExtremes) {
  struct Extreme {
    std::size_t max_batch;
    unsigned ring_entries;
  };
  for (const Extreme x : {Extreme{1, 8}, Extreme{4096, 8}, Extreme{4096, 4096}}) {
    for (bool multishot : {true, false}) {
      SCOPED_TRACE("max_batch " + std::to_string(x.max_batch) + ", ring_entries " +
                   std::to_string(x.ring_entries) + (multishot ? ", multishot" : ""));
      EngineOptions o;
      o.max_batch = x.max_batch;
      o.ring_entries = x.ring_entries;
      o.multishot = multishot;
      start(2, o);
      constexpr int kPairs = 16;
      Handle peers[kPairs];
      std::vector<DescriptorRef> sockets;
      for (int i = 0; i < kPairs; ++i) {
        auto d = attach_pair(peers[i]);
        ASSERT_TRUE(d);
        sockets.push_back(*d);
      }
      for (int round = 0; round < 3; ++round) {
        Countdown received(kPairs);
        Receive receives[kPairs];
        for (int i = 0; i < kPairs; ++i) {
          receives[i].prepare(sockets[static_cast<std::size_t>(i)], received);
          if (engine().start(receives[i])) {
            receives[i].last = receives[i].result;
            received.count_down();
          }
        }
        for (Handle p : peers)
          ASSERT_TRUE(test::send_byte(p, 'r'));
        wait_or_exit(received, "a round of receives");
        for (const Receive& r : receives)
          EXPECT_EQ(r.last.load(), 1);
      }
      for (DescriptorRef d : sockets)
        engine().close(d);
      EXPECT_TRUE(eventually([&] { return engine().counters().descriptors == 0; }));
      for (Handle p : peers)
        test::close_peer(p);
      stop();
    }
  }
}

// Catches: an io mode the engine cannot run accepted silently: epoll has no rings mode.
TEST(UringRingsOptions, EpollRefusesRingsMode) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  EngineOptions o;
  o.kind = "epoll";
  o.io_mode = IoMode::rings;
  auto engine = Engine::create(scheduler, o);
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error(), std::make_error_code(std::errc::invalid_argument));
  scheduler.stop();
}

// Catches: "rings" not spelled the same way by the parser, the printer and ARBOR_IO_MODE.
TEST(UringRingsOptions, RingsIsAnIoModeName) {
  auto mode = parse_io_mode("rings");
  ASSERT_TRUE(mode);
  ASSERT_TRUE(mode->has_value());
  EXPECT_EQ(**mode, IoMode::rings);
  EXPECT_STREQ(to_string(IoMode::rings), "rings");
  test::set_env("ARBOR_IO_MODE", "rings");
  auto options = EngineOptions::from_env();
  test::unset_env("ARBOR_IO_MODE");
  ASSERT_TRUE(options);
  EXPECT_EQ(options->io_mode, IoMode::rings);
}

}  // namespace
}  // namespace arbor::io
