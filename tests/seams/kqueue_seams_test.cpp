// Seams: the kqueue adapter of the readiness core, where a report outlives its socket and where
// kqueue takes input epoll refuses. Built only with the kqueue engine (BSD, macOS; Linux with
// -DARBOR_KQUEUE=ON over libkqueue). kevent(2) is interposed for this binary, as send(2) is in
// engine_seams_test.cpp, to hold the poller between the system call and the core's processing
// of its results. Each test starts with one line saying what it would catch.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/event.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "arbor/io/engine.hpp"
#include "arbor/io/operation.hpp"
#include "arbor/sched/scheduler.hpp"

namespace {

// Once armed, a wait (nevents > 0) whose results hold an error report (EV_EOF with fflags) is
// held after the real call returned and before the engine sees the batch, until the test
// releases it; `turns` counts the waits that begin after the release (one means the held batch
// was processed).
struct KeventGate {
  std::atomic<bool> armed{false};
  std::atomic<int> state{0};  // 0 idle, 1 held, 2 released
  std::atomic<int> turns{0};
  void release() {
    state.store(2);
    state.notify_all();
  }
};
KeventGate g_gate;

}  // namespace

extern "C" int kevent(int kq, const struct kevent* changes, int nchanges, struct kevent* events,
                      int nevents, const struct timespec* timeout) {
  using Kevent =
      int (*)(int, const struct kevent*, int, struct kevent*, int, const struct timespec*);
  static const auto real = reinterpret_cast<Kevent>(::dlsym(RTLD_NEXT, "kevent"));
  if (nevents > 0 && g_gate.state.load() == 2) g_gate.turns.fetch_add(1);
  const int n = real(kq, changes, nchanges, events, nevents, timeout);
  if (nevents > 0 && g_gate.armed.load()) {
    for (int i = 0; i < n; ++i)
      if ((events[i].flags & EV_EOF) != 0 && events[i].fflags != 0) {
        g_gate.armed.store(false);
        g_gate.state.store(1);
        g_gate.state.notify_all();
        for (int s; (s = g_gate.state.load()) != 2;)
          g_gate.state.wait(s);
        break;
      }
  }
  return n;
}

namespace arbor::io {
namespace {

using namespace std::chrono_literals;

// A connected loopback TCP pair: [0] for the engine, [1] the peer.
bool tcp_pair(int (&out)[2]) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return false;
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
  const int accepted = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (accepted < 0) return false;
  out[0] = accepted;
  out[1] = client;
  return true;
}

void reset_peer(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);  // an RST, not a FIN
}

struct Receive : Operation {
  std::byte byte{};
  std::atomic<int> completions{0};
  std::atomic<std::int64_t> last{1};
  void prepare(DescriptorRef d) noexcept {
    target(d);
    kind = OpKind::receive;
    data = &byte;
    size = 1;
    complete = &on_complete;
  }
  static void on_complete(Operation& op, std::int64_t r) noexcept {
    auto& self = static_cast<Receive&>(op);
    self.last.store(r);
    self.completions.fetch_add(1);
    self.completions.notify_all();
  }
};

template <class F>
bool eventually(F f, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

int open_fds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) ++n;
  return n;
}

// Would catch: a report in flight while its socket is closed and its pooled descriptor handed
// to the next socket pins the old socket's error (Readiness::taken_error, the error kqueue took
// with EV_EOF) on the new, healthy one, whose first receive then fails with ECONNRESET.
TEST(KqueueSeams, AnErrorReportInFlightForAClosedSocketIsNotGivenToTheNextSocket) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  EngineOptions o;
  o.kind = "kqueue";
  auto made = Engine::create(scheduler, o);
  ASSERT_TRUE(made) << made.error().message();
  auto& engine = **made;

  int old_pair[2];
  ASSERT_TRUE(tcp_pair(old_pair));
  auto old_socket = engine.attach(old_pair[0]);
  ASSERT_TRUE(old_socket);
  g_gate.armed.store(true);
  reset_peer(old_pair[1]);
  // The poller (the one worker) now holds a batch with the old socket's error report.
  ASSERT_TRUE(eventually([] { return g_gate.state.load() == 1; }))
      << "no error report arrived for the reset socket";

  engine.close(*old_socket);  // its descriptor goes back to the pool (last in, first out)
  int new_pair[2];
  ASSERT_TRUE(tcp_pair(new_pair));
  auto new_socket = engine.attach(new_pair[0]);
  g_gate.release();  // the held batch reaches the core: it names the reused descriptor
  ASSERT_TRUE(new_socket);
  ASSERT_EQ(new_socket->descriptor, old_socket->descriptor)
      << "the pool no longer reuses the last descriptor freed: this test must find another way "
         "to put the new socket on the old one's descriptor";
  ASSERT_TRUE(eventually([] { return g_gate.turns.load() > 0; }));

  Receive receive;
  receive.prepare(*new_socket);
  const bool finished = engine.start(receive);
  EXPECT_FALSE(finished) << "a receive on a healthy socket with nothing to read finished with "
                         << receive.result << " (-ECONNRESET is " << -ECONNRESET << ")";
  if (!finished) {
    ASSERT_EQ(::write(new_pair[1], "x", 1), 1);
    ASSERT_TRUE(eventually([&] { return receive.completions.load() == 1; }));
    EXPECT_EQ(receive.last.load(), 1);
  }
  engine.close(*new_socket);
  ::close(new_pair[1]);
  engine.stop();
  scheduler.stop();
}

class KqueueBadInput : public ::testing::TestWithParam<std::string> {};

// Would catch: a second attach of a watched fd taken as a modify (kqueue's EV_ADD on a watched
// ident), which leaves the first descriptor deaf and, over libkqueue, a duplicate of the socket
// that outlives both closes (the peer never sees the end). epoll refuses it (EEXIST); so must
// kqueue.
TEST_P(KqueueBadInput, TheSameFdAttachedTwiceIsRefused) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  EngineOptions o;
  o.kind = GetParam();
  auto made = Engine::create(scheduler, o);
  ASSERT_TRUE(made) << made.error().message();
  auto& engine = **made;
  int pair[2];
  ASSERT_TRUE(tcp_pair(pair));
  const int before = open_fds();
  auto first = engine.attach(pair[0]);
  ASSERT_TRUE(first);
  auto second = engine.attach_stream(pair[0]);
  EXPECT_FALSE(second) << "a second attach of a watched fd was accepted";
  if (second) engine.close(*second);
  engine.close(*first);
  EXPECT_LE(open_fds(), before - 1) << "a duplicate of the socket outlived both closes";
  char c;
  EXPECT_TRUE(eventually([&] {
    const ssize_t r = ::recv(pair[1], &c, 1, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN);
  })) << "the peer never saw the socket end";
  ::close(pair[1]);
  engine.stop();
  scheduler.stop();
}

// kqueue, and epoll where it is built, whose refusal is the behaviour kqueue's must match.
std::vector<std::string> readiness_engines() {
  std::vector<std::string> names{"kqueue"};
  for (const auto& name : Engine::available())
    if (name == "epoll") names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Engines, KqueueBadInput, ::testing::ValuesIn(readiness_engines()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace arbor::io
