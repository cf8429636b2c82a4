// Close means closed, on every engine and io mode: when close() returns, the kernel has
// stopped serving the socket, whatever the engine still has in flight for it on some ring.
//
// On io_uring a socket's multishot accept (or any request in a ring) holds its own reference to
// the socket's file, and the ring that runs it is driven by one thread (rings mode: its worker,
// which may be busy or blocked). Before the fix close() only queued a request for that thread,
// so the listening socket stayed in LISTEN: a plain connect() right after close() returned was
// accepted by the kernel (uring-rings: 100 of 100 rounds closed in a task that then blocks its
// worker), a rebind of the port failed, and a stream's peer saw no end of stream. The checks
// below use plain blocking system calls from the thread that closed, before anything else runs
// on it, so nothing but close() itself can have closed the socket; each loops enough rounds to
// fail reliably on the old behaviour.
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

constexpr int kRounds = 100;

// A plain blocking connect to `to`: 0 if it connected (the socket is in *fd), else errno.
int blocking_connect(const Address& to, int* fd = nullptr) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errno;
  const int r = ::connect(s, static_cast<const sockaddr*>(to.native()), to.native_size());
  const int error = r == 0 ? 0 : errno;
  if (r == 0 && fd != nullptr)
    *fd = s;
  else
    ::close(s);
  return error;
}

// Whether the peer of `fd` has ended the stream (end of stream or reset is waiting), looking
// once without waiting.
bool ended_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return false;
  char c;
  const auto n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

// Whether the peer of `fd` ends the stream within `ms` (a bound, not a synchronisation).
bool ends_within(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return false;
  char c;
  const auto n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

int open_descriptors() {
  int n = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (::readdir(dir) != nullptr)
    ++n;
  ::closedir(dir);
  return n;
}

class CloseTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt_ = test::make_runtime(GetParam());
    ASSERT_TRUE(rt_);
  }
  std::unique_ptr<Runtime> rt_;
};

// What one round saw after close() returned.
struct Seen {
  int connect = 0;       // the plain connect's errno (0: it connected)
  bool rebound = false;  // TcpListener::bind on the same address succeeded
};

// Closes `listener` and, before anything else runs on this thread, connects to its address and
// binds it again. Run in a task, it also blocks the task's worker meanwhile, which may be the
// one whose ring holds the listener's accept.
Seen close_then_probe(Runtime& rt, TcpListener& listener, const Address& address) {
  listener.close();
  Seen seen;
  int fd = -1;
  seen.connect = blocking_connect(address, &fd);
  if (fd >= 0) ::close(fd);
  auto again = TcpListener::bind(rt, address);
  seen.rebound = again.has_value();
  return seen;
}

// A listener with a multishot accept armed (one connection accepted) and a second accept
// pending, closed from a task (odd rounds) or from the test's thread (even rounds): a connect
// right after close() is refused, the port can be bound again, and the pending accept gets no
// connection (it ends with operation_canceled, or bad_file_descriptor if it had not started).
TEST_P(CloseTest, AListenerClosedWithAnAcceptPendingRefusesConnectsAtOnce) {
  int connected = 0, not_rebound = 0, not_cancelled = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
    ASSERT_TRUE(listener);
    const Address address = *listener->local_address();
    auto first = rt_->spawn(listener->accept());
    int client = -1;
    ASSERT_EQ(blocking_connect(address, &client), 0);
    auto accepted = first.join_blocking();
    ASSERT_TRUE(accepted) << accepted.error().message();
    std::atomic<bool> started{false};
    auto pending = rt_->spawn([](TcpListener& l, std::atomic<bool>& s) -> Task<Result<TcpStream>> {
      s.store(true);
      co_return co_await l.accept();
    }(*listener, started));
    ASSERT_TRUE(sched::test::eventually([&] { return started.load(); }));
    Seen seen;
    if (round % 2 == 1) {
      seen = rt_->spawn([](Runtime& rt, TcpListener& l, Address a) -> Task<Seen> {
                  co_return close_then_probe(rt, l, a);
                }(*rt_, *listener, address))
                 .join_blocking();
    } else {
      seen = close_then_probe(*rt_, *listener, address);
    }
    connected += seen.connect != ECONNREFUSED;
    not_rebound += !seen.rebound;
    auto result = pending.join_blocking();
    // Cancelled if it was pending; if it had not reached the engine yet, refused as closed.
    not_cancelled += result || (result.error() != std::errc::operation_canceled &&
                                result.error() != std::errc::bad_file_descriptor);
    ::close(client);
  }
  EXPECT_EQ(connected, 0) << "of " << kRounds << " rounds, a connect after close() was not refused";
  EXPECT_EQ(not_rebound, 0) << "of " << kRounds << " rounds, the port could not be bound again";
  EXPECT_EQ(not_cancelled, 0) << "of " << kRounds
                              << " rounds, the pending accept did not end as cancelled";
}

// The closing task blocks its worker (here a plain blocking call, on purpose) while the test's
// thread connects: a listener closed before the block accepts nothing during it.
TEST_P(CloseTest, AListenerClosedByATaskThatThenBlocksItsWorkerAcceptsNothing) {
  int connected = 0;
  for (int round = 0; round < kRounds / 4; ++round) {
    auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
    ASSERT_TRUE(listener);
    const Address address = *listener->local_address();
    auto first = rt_->spawn(listener->accept());
    int client = -1;
    ASSERT_EQ(blocking_connect(address, &client), 0);
    ASSERT_TRUE(first.join_blocking());
    sched::test::Countdown closed(1), probed(1);
    auto closer = rt_->spawn(
        [](TcpListener& l, sched::test::Countdown& c, sched::test::Countdown& p) -> Task<void> {
          l.close();
          c.count_down();
          sched::test::wait_or_exit(p, "the test's connect");  // blocks this worker
          co_return;
        }(*listener, closed, probed));
    sched::test::wait_or_exit(closed, "the close");
    int fd = -1;
    connected += blocking_connect(address, &fd) != ECONNREFUSED;
    if (fd >= 0) ::close(fd);
    probed.count_down();
    closer.join_blocking();
    ::close(client);
  }
  EXPECT_EQ(connected, 0) << "of " << kRounds / 4
                          << " rounds, the closed listener accepted a connection";
}

// A stream with a read pending (a multishot receive armed, on io_uring), closed from a task or
// from the test's thread: its peer sees the end at once, and the read ends with
// operation_canceled (bad_file_descriptor if it had not started), never with the end of stream
// a shutdown would report.
TEST_P(CloseTest, AStreamClosedWithAReadPendingEndsAtOnceForItsPeer) {
  int not_ended = 0, not_cancelled = 0;
  auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  const Address address = *listener->local_address();
  for (int round = 0; round < kRounds; ++round) {
    auto accepting = rt_->spawn(listener->accept());
    int client = -1;
    ASSERT_EQ(blocking_connect(address, &client), 0);
    auto server = accepting.join_blocking();
    ASSERT_TRUE(server);
    std::atomic<bool> started{false};
    auto reader = rt_->spawn([](TcpStream& s, std::atomic<bool>& st) -> Task<std::error_code> {
      std::byte buf[16];
      st.store(true);
      auto n = co_await s.read_some(buf);
      co_return n ? std::error_code{} : n.error();
    }(*server, started));
    // Pending, not on its way: a second read is refused as busy only once the first holds the
    // socket's read slot (before that, epoll's first attempt may still be in its recv(2), and
    // a close then leaves the write side, and so the peer's end, to that call).
    std::byte probe[1];
    ASSERT_TRUE(sched::test::eventually([&] {
      auto n = server->try_read_some(probe);
      return started.load() && !n && n.error() == std::errc::device_or_resource_busy;
    }));
    bool ended;
    if (round % 2 == 1) {
      ended = rt_->spawn([](TcpStream& s, int peer) -> Task<bool> {
                   s.close();
                   co_return ended_now(peer);
                 }(*server, client))
                  .join_blocking();
    } else {
      server->close();
      ended = ended_now(client);
    }
    not_ended += !ended;
    const std::error_code read = reader.join_blocking();
    not_cancelled +=
        read != std::errc::operation_canceled && read != std::errc::bad_file_descriptor;
    ::close(client);
  }
  EXPECT_EQ(not_ended, 0) << "of " << kRounds << " rounds, the peer saw no end after close()";
  EXPECT_EQ(not_cancelled, 0) << "of " << kRounds
                              << " rounds, the pending read did not end with operation_canceled";
}

// A datagram socket closed with a receive pending: the receive ends with operation_canceled
// (bad_file_descriptor if it had not started), never with what a shutdown would report.
TEST_P(CloseTest, AUdpSocketClosedWithAReceivePendingCancelsIt) {
  int not_cancelled = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto socket = UdpSocket::bind(*rt_, Address::loopback_v4(0));
    ASSERT_TRUE(socket);
    std::atomic<bool> started{false};
    Address from;
    auto reader =
        rt_->spawn([](UdpSocket& s, Address& f, std::atomic<bool>& st) -> Task<std::error_code> {
          std::byte buf[16];
          st.store(true);
          auto n = co_await s.receive_from(buf, f);
          co_return n ? std::error_code{} : n.error();
        }(*socket, from, started));
    ASSERT_TRUE(sched::test::eventually([&] { return started.load(); }));
    if (round % 2 == 1)
      rt_->spawn([](UdpSocket& s) -> Task<void> {
           s.close();
           co_return;
         }(*socket))
          .join_blocking();
    else
      socket->close();
    const std::error_code received = reader.join_blocking();
    not_cancelled +=
        received != std::errc::operation_canceled && received != std::errc::bad_file_descriptor;
  }
  EXPECT_EQ(not_cancelled, 0) << "of " << kRounds
                              << " rounds, the pending receive did not end with operation_canceled";
}

// Connections the kernel accepted for a listener (a multishot accept keeps them until asked)
// when it closes are closed with it, not leaked: every client sees its end, and the process
// holds no more descriptors than before.
TEST_P(CloseTest, ConnectionsAcceptedButNotTakenCloseWithTheListener) {
  constexpr int kClients = 8;
  const int before = open_descriptors();
  int not_ended = 0;
  for (int round = 0; round < kRounds / 4; ++round) {
    auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
    ASSERT_TRUE(listener);
    const Address address = *listener->local_address();
    auto first = rt_->spawn(listener->accept());
    int client = -1;
    ASSERT_EQ(blocking_connect(address, &client), 0);
    ASSERT_TRUE(first.join_blocking());  // the multishot accept stays armed
    std::vector<int> clients{client};
    for (int i = 0; i < kClients; ++i) {
      int fd = -1;
      ASSERT_EQ(blocking_connect(address, &fd), 0);
      clients.push_back(fd);
    }
    listener->close();
    for (std::size_t i = 1; i < clients.size(); ++i)
      not_ended += !ends_within(clients[i], 5000);
    for (int fd : clients)
      ::close(fd);
  }
  EXPECT_EQ(not_ended, 0);
  EXPECT_TRUE(sched::test::eventually([&] { return open_descriptors() <= before; }))
      << open_descriptors() << " descriptors open, " << before << " before";
}

// A write waiting for room (its socket's send buffer full) is pending: a close before it runs
// again cancels it. One worker, so the order is fixed: the writer parks; a task then makes
// room (the peer reads), waits until the engine has delivered what that readiness (or, on
// io_uring, the kernel's send) produced, which queues behind it on the only worker, and closes
// the stream. On epoll the delivered retry then ran send(2) on the closed socket, sent its
// bytes after close() had returned and reported them written; io_uring reports the send as
// cancelled.
TEST_P(CloseTest, AWriteWaitingForRoomIsCancelledByACloseBeforeItRunsAgain) {
  auto rt = test::make_runtime(GetParam(), /*workers=*/1);
  ASSERT_TRUE(rt);
  int written = 0, other = 0;
  auto listener = TcpListener::bind(*rt, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  const Address address = *listener->local_address();
  for (int round = 0; round < kRounds / 10; ++round) {
    auto accepting = rt->spawn(listener->accept());
    int client = -1;
    ASSERT_EQ(blocking_connect(address, &client), 0);
    auto server = accepting.join_blocking();
    ASSERT_TRUE(server);
    const int fd = static_cast<int>(server->native_handle());
    // Full: nothing pending on the stream yet, so a plain send from this thread is harmless.
    std::vector<std::byte> chunk(64 * 1024);
    while (::send(fd, chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
    }
    ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno;
    std::atomic<bool> started{false};
    auto writer = rt->spawn([](TcpStream& s, std::span<const std::byte> b,
                               std::atomic<bool>& st) -> Task<Result<std::size_t>> {
      st.store(true);
      co_return co_await s.write_some(b);
    }(*server, chunk, started));
    ASSERT_TRUE(sched::test::eventually([&] { return started.load(); }));
    // Queued after the writer on the only worker: it runs once the writer has parked.
    const bool delivered =
        rt->spawn([](Runtime& r, TcpStream& s, int peer) -> Task<bool> {
            const auto before = r.engine().counters().events;
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            char sink[64 * 1024];
            while (r.engine().counters().events == before) {
              while (::recv(peer, sink, sizeof sink, MSG_DONTWAIT) > 0) {
              }
              r.scheduler().poll_driver();  // the workers' driver, if this engine has one
              if (std::chrono::steady_clock::now() > until) co_return false;
            }
            s.close();
            co_return true;
          }(*rt, *server, client))
            .join_blocking();
    ASSERT_TRUE(delivered) << "the engine delivered nothing for the room made";
    auto n = writer.join_blocking();
    if (n)
      ++written;
    else if (n.error() != std::errc::operation_canceled)
      ++other;
    ::close(client);
  }
  EXPECT_EQ(written, 0) << "of " << kRounds / 10
                        << " rounds, a write closed before it ran again reported bytes written";
  EXPECT_EQ(other, 0) << "of " << kRounds / 10 << " rounds, it ended with another error";
}

// Not a close: a stream whose read side is shut down (http::Server::shutdown() does this to
// every connection to drain it) with a gather write pending, waiting for its peer to read. The
// write must go on as the peer reads. On io_uring the shutdown's wake-up (no room for the
// send yet) used up the request's poll: the kernel then completed the sendmsg with -EAGAIN,
// which reached the writer as resource_unavailable_try_again (the HTTP drain then cut a
// reply), or the send stalled until the socket was shut down entirely. A plain send (not
// gathered) is not affected.
TEST_P(CloseTest, AGatherWritePendingWhenTheReadSideIsShutDownGoesOn) {
  int failed = 0;
  int last_recv = -1;
  std::string last;
  auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  const Address address = *listener->local_address();
  std::vector<std::byte> big(std::size_t{8} << 20);
  for (int round = 0; round < kRounds / 10; ++round) {
    auto accepting = rt_->spawn(listener->accept());
    int client = -1;
    ASSERT_EQ(blocking_connect(address, &client), 0);
    auto server = accepting.join_blocking();
    ASSERT_TRUE(server);
    // A safety bound (a round takes milliseconds): a stalled write fails the round, not the
    // suite.
    timeval bound{2, 0};
    ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    auto writer = rt_->spawn([](TcpStream& s, std::span<const std::byte> b) -> Task<Result<void>> {
      const io::ConstBuffer parts[2] = {{b.data(), 100}, {b.data() + 100, b.size() - 100}};
      co_return co_await s.write_all(std::span<const io::ConstBuffer>(parts));
    }(*server, big));
    // The write is under way (bytes arrive) and cannot finish: 8 MiB is more than both
    // sockets' buffers hold while this side reads nothing.
    pollfd p{client, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10'000), 1);
    ASSERT_EQ(::shutdown(static_cast<int>(server->native_handle()), SHUT_RD), 0);
    std::size_t total = 0;
    std::vector<char> sink(64 * 1024);
    while (total < big.size()) {
      const auto n = ::recv(client, sink.data(), sink.size(), 0);
      // EINTR: io_uring's task work for a request this thread submitted interrupts a blocking
      // call (one with SO_RCVTIMEO is not restarted).
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        last_recv = n < 0 ? errno : 0;
        break;
      }
      total += static_cast<std::size_t>(n);
    }
    if (total < big.size())  // stalled: end the write so that the round ends
      ::shutdown(static_cast<int>(server->native_handle()), SHUT_RDWR);
    auto written = writer.join_blocking();
    if (total < big.size() || !written) {
      ++failed;
      last = std::to_string(total) + " of " + std::to_string(big.size()) + " bytes arrived; " +
             (written ? "the write succeeded" : "the write failed: " + written.error().message()) +
             " (the client's last recv: errno " + std::to_string(last_recv) + ")";
    }
    ::close(client);
  }
  EXPECT_EQ(failed, 0) << "of " << kRounds / 10 << " rounds; the last: " << last;
}

INSTANTIATE_TEST_SUITE_P(Engines, CloseTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
