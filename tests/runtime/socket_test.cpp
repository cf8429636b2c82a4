// Socket tests, run against every engine available here (parameterised). Everything stays on
// 127.0.0.1 with ephemeral ports; every server is started and stopped by its test.
#include "arbor/io/socket.hpp"

#include <gtest/gtest.h>
#if !defined(_WIN32)
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "arbor/internal/log.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

Bytes bytes_of(std::string_view s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

std::uint64_t fnv1a(std::span<const std::byte> data, std::uint64_t h = 1469598103934665603ull) {
  for (std::byte b : data)
    h = (h ^ static_cast<std::uint8_t>(b)) * 1099511628211ull;
  return h;
}

using test::connected_pair;
using test::Pair;

class SocketTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt_ = test::make_runtime(GetParam());
    ASSERT_TRUE(rt_);
  }
  template <class T>
  T run(Task<T> task) {
    return rt_->block_on(std::move(task));
  }
  std::unique_ptr<Runtime> rt_;
};

TEST_P(SocketTest, AcceptConnectReadWrite) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair: " + pair.error().message();
    auto msg = bytes_of("hello, arbor");
    if (!co_await pair->client.write_all(msg)) co_return "client write";
    Bytes got(msg.size());
    if (!co_await pair->server.read_exact(got)) co_return "server read";
    if (!co_await pair->server.write_all(got)) co_return "server write";
    Bytes back(msg.size());
    if (!co_await pair->client.read_exact(back)) co_return "client read";
    co_return back == msg ? "ok" : "mismatch";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(SocketTest, PeerAddressesMatch) {
  auto body = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    co_return *pair->client.local_address() == *pair->server.peer_address() &&
        *pair->server.local_address() == *pair->client.peer_address();
  };
  EXPECT_TRUE(run(body(*rt_)));
}

TEST_P(SocketTest, EndOfStreamReadsZeroAndReadExactReportsIt) {
  auto body = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    auto msg = bytes_of("abc");
    (void)co_await pair->client.write_all(msg);
    pair->client.close();
    Bytes buf(10);
    auto exact = co_await pair->server.read_exact(buf);  // 3 bytes, then EOF
    if (exact || exact.error() != Errc::end_of_stream) co_return false;
    auto n = co_await pair->server.read_some(buf);
    co_return n&&* n == 0;
  };
  EXPECT_TRUE(run(body(*rt_)));
}

TEST_P(SocketTest, HalfCloseStillLetsThePeerReply) {
  auto body = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    auto request = bytes_of("request");
    (void)co_await pair->client.write_all(request);
    if (!pair->client.shutdown_write()) co_return false;
    Bytes all;
    std::byte buf[64];
    for (;;) {  // server reads until end of stream
      auto n = co_await pair->server.read_some(buf);
      if (!n) co_return false;
      if (*n == 0) break;
      all.insert(all.end(), buf, buf + *n);
    }
    if (all != request) co_return false;
    auto reply = bytes_of("reply");
    if (!co_await pair->server.write_all(reply)) co_return false;
    Bytes got(reply.size());
    co_return (co_await pair->client.read_exact(got)).has_value() && got == reply;
  };
  EXPECT_TRUE(run(body(*rt_)));
}

// The reset has arrived before the read starts (a loopback RST is delivered within close()).
TEST_P(SocketTest, PeerResetIsAnErrorOnRead) {
  if (test::under_wine())
    GTEST_SKIP() << "wine 8.0 forgets a TCP reset once the wineserver has peeked at the socket "
                    "(its MSG_PEEK recv takes the ECONNRESET): a receive started after the RST "
                    "arrived reports end of stream, where Windows reports WSAECONNRESET. "
                    "PeerResetFailsAPendingRead covers the engine's mapping of the reset.";
  auto body = [](Runtime& rt) -> Task<std::error_code> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return pair.error();
    (void)pair->client.set_linger_reset();
    pair->client.close();
    std::byte buf[16];
    auto n = co_await pair->server.read_some(buf);
    co_return n ? std::error_code{} : n.error();
  };
  EXPECT_EQ(run(body(*rt_)), std::errc::connection_reset);
}

// The read is pending when the reset arrives. With one worker, a task spawned by a running task
// runs only once that task suspends, so the reset always meets a read that is already pending.
TEST_P(SocketTest, PeerResetFailsAPendingRead) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r) -> Task<std::error_code> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return pair.error();
    auto resetter = r.spawn([](TcpStream& s) -> Task<void> {
      (void)s.set_linger_reset();
      s.close();
      co_return;
    }(pair->client));
    std::byte buf[16];
    auto n = co_await pair->server.read_some(buf);
    co_await std::move(resetter);
    co_return n ? std::error_code{} : n.error();
  };
  EXPECT_EQ(rt->block_on(body(*rt)), std::errc::connection_reset);
}

TEST_P(SocketTest, WriteToAResetPeerFailsWithoutKillingTheProcess) {
  auto body = [](Runtime& rt) -> Task<std::error_code> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return pair.error();
    (void)pair->client.set_linger_reset();
    pair->client.close();
    Bytes chunk(64 * 1024, std::byte{1});
    for (int i = 0; i < 1000; ++i) {
      auto w = co_await pair->server.write_all(chunk);
      if (!w) co_return w.error();
    }
    co_return std::error_code{};
  };
  const auto e = run(body(*rt_));
  EXPECT_TRUE(e == std::errc::broken_pipe || e == std::errc::connection_reset) << e.message();
}

TEST_P(SocketTest, ConnectionRefused) {
  // A port that is bound but not listening: connecting there is refused. The probe keeps it
  // until the connect has failed; closed first, its port could become the connecting socket's
  // own ephemeral port, and a socket connecting to itself succeeds (TCP simultaneous open).
  // Seen under wine, about one run in twenty: ConnectEx needs a bound socket, and Linux's
  // bind to port 0 hands out the port the probe had just freed.
  auto probe = io::open_socket(Address::loopback_v4(0), io::SocketType::tcp);
  ASSERT_TRUE(probe);
  ASSERT_FALSE(io::bind(*probe, Address::loopback_v4(0)));
  const Address target = *io::local_address(*probe);
  auto body = [](Runtime& rt, Address a) -> Task<std::string> {
    auto s = co_await TcpStream::connect(rt, a);
    if (!s) co_return s.error() == std::errc::connection_refused ? "refused" : s.error().message();
    co_return "connected from port " + std::to_string(s->local_address()->port());
  };
  EXPECT_EQ(run(body(*rt_, target)), "refused") << "to port " << target.port();
  io::close_handle(*probe);
}

TEST_P(SocketTest, SixtyFourMebibytesArriveIntactBothWays) {
  constexpr std::size_t kTotal = 64u << 20;
  auto body = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    auto writer = [](TcpStream& s) -> Task<std::uint64_t> {
      std::mt19937_64 rng(42);
      std::vector<std::uint64_t> block(8192);
      std::uint64_t hash = 1469598103934665603ull;
      for (std::size_t sent = 0; sent < kTotal; sent += block.size() * 8) {
        for (auto& w : block)
          w = rng();
        auto bytes = std::as_bytes(std::span(block));
        hash = fnv1a(bytes, hash);
        if (!co_await s.write_all(bytes)) co_return 0;
      }
      (void)s.shutdown_write();
      co_return hash;
    };
    auto reader = [](TcpStream& s) -> Task<std::uint64_t> {
      std::vector<std::byte> buf(100'000);  // not a multiple of the writer's block
      std::uint64_t hash = 1469598103934665603ull;
      std::size_t total = 0;
      for (;;) {
        auto n = co_await s.read_some(buf);
        if (!n) co_return 1;
        if (*n == 0) break;
        hash = fnv1a(std::span(buf).first(*n), hash);
        total += *n;
      }
      co_return total == kTotal ? hash : 2;
    };
    auto [sent, received] = co_await when_all(writer(pair->client), reader(pair->server));
    co_return sent != 0 && sent == received;
  };
  EXPECT_TRUE(run(body(*rt_)));
}

TEST_P(SocketTest, ThousandConcurrentConnections) {
  constexpr int kClients = 1000;
  auto body = [](Runtime& rt) -> Task<int> {
    auto listener = TcpListener::bind(rt, Address::loopback_v4(0), {.backlog = 4096});
    if (!listener) co_return -1;
    auto echo = [](TcpStream s) -> Task<void> {
      std::byte buf[64];
      for (;;) {
        auto n = co_await s.read_some(buf);
        if (!n || *n == 0) co_return;
        if (!co_await s.write_all({buf, *n})) co_return;
      }
    };
    auto server = [](Runtime& r, TcpListener& l, decltype(echo) e) -> Task<void> {
      for (int i = 0; i < kClients; ++i) {
        auto s = co_await l.accept();
        if (!s) co_return;
        r.spawn(e(std::move(*s))).detach();
      }
    };
    auto accepting = rt.spawn(server(rt, *listener, echo));
    auto client = [](Runtime& r, Address a, int k) -> Task<bool> {
      auto s = co_await TcpStream::connect(r, a);
      if (!s) co_return false;
      std::uint64_t out = static_cast<std::uint64_t>(k) * 2654435761u, in = 0;
      if (!co_await s->write_all(std::as_bytes(std::span(&out, 1)))) co_return false;
      if (!co_await s->read_exact(std::as_writable_bytes(std::span(&in, 1)))) co_return false;
      co_return in == out;
    };
    std::vector<Task<bool>> clients;
    const Address a = *listener->local_address();
    for (int k = 0; k < kClients; ++k)
      clients.push_back(client(rt, a, k));
    auto results = co_await when_all(std::move(clients));
    co_await std::move(accepting);
    co_return static_cast<int>(std::count(results.begin(), results.end(), true));
  };
  EXPECT_EQ(run(body(*rt_)), kClients);
}

TEST_P(SocketTest, ReadTimeoutLeavesTheStreamUsable) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair";
    Bytes buf(4);
    auto r = co_await with_timeout(20ms, pair->server.read_exact(buf));
    if (r || r.error() != std::errc::timed_out) co_return "expected timed_out";
    auto msg = bytes_of("late");
    if (!co_await pair->client.write_all(msg)) co_return "write";
    if (!co_await pair->server.read_exact(buf)) co_return "read after timeout";
    co_return buf == msg ? "ok" : "mismatch";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

// Timeouts racing completions: every read is cancelled by a deadline about as long as the gap
// between the writer's bytes, so cancellations meet reads that are just completing (and the
// next read, at the same address in the frame, that follows). Every byte arrives exactly once
// and in order, and no cancellation hits a read that did not ask for it.
TEST_P(SocketTest, TimeoutsRacingCompletionsLoseNothing) {
  constexpr int kBytes = 300;
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair";
    auto writer = [](TcpStream& s) -> Task<bool> {
      for (int i = 0; i < kBytes; ++i) {
        const auto b = static_cast<std::byte>(i);
        if (!co_await s.write_all(std::span(&b, 1))) co_return false;
        (void)co_await sleep_for(std::chrono::microseconds(20 + i % 50));
      }
      co_return true;
    };
    auto reader = [](TcpStream& s) -> Task<std::string> {
      int next = 0;
      int timeouts = 0;
      while (next < kBytes) {
        std::byte b[1];
        auto r = co_await with_timeout(std::chrono::microseconds(30 + next % 40), s.read_exact(b));
        if (!r) {
          if (r.error() != std::errc::timed_out) co_return "read: " + r.error().message();
          ++timeouts;
          continue;
        }
        if (b[0] != static_cast<std::byte>(next))
          co_return "out of order at " + std::to_string(next);
        ++next;
      }
      co_return "ok";
    };
    auto [wrote, read] = co_await when_all(writer(pair->client), reader(pair->server));
    co_return wrote ? read : "writer";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

// The same race for readable(): deadlines cut its waits as bytes arrive, and the read after
// each one that succeeds finds every byte there, in order (a cancelled readable() took none,
// and its cancellation never reaches the read that follows it).
TEST_P(SocketTest, ReadableTimeoutsRacingCompletionsLoseNothing) {
  constexpr int kBytes = 300;
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair";
    auto writer = [](TcpStream& s) -> Task<bool> {
      for (int i = 0; i < kBytes; ++i) {
        const auto b = static_cast<std::byte>(i);
        if (!co_await s.write_all(std::span(&b, 1))) co_return false;
        (void)co_await sleep_for(std::chrono::microseconds(20 + i % 50));
      }
      co_return true;
    };
    auto reader = [](TcpStream& s) -> Task<std::string> {
      auto wait = [](TcpStream& t) -> Task<Result<void>> { co_return co_await t.readable(); };
      int next = 0;
      while (next < kBytes) {
        auto r = co_await with_timeout(std::chrono::microseconds(30 + next % 40), wait(s));
        if (!r) {
          if (r.error() != std::errc::timed_out) co_return "readable: " + r.error().message();
          continue;
        }
        std::byte b[1];
        if (!co_await s.read_exact(b)) co_return "read after readable";
        if (b[0] != static_cast<std::byte>(next))
          co_return "out of order at " + std::to_string(next);
        ++next;
      }
      co_return "ok";
    };
    auto [wrote, read] = co_await when_all(writer(pair->client), reader(pair->server));
    co_return wrote ? read : "writer";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(SocketTest, StopCancelsPendingReadAndAccept) {
  auto pair_task = [](Runtime& rt) -> Task<Result<Pair>> { co_return co_await connected_pair(rt); };
  auto pair = run(pair_task(*rt_));
  ASSERT_TRUE(pair);
  auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  sched::test::Countdown started(2);
  auto reader = rt_->spawn([](TcpStream& s, sched::test::Countdown& st) -> Task<std::error_code> {
    st.count_down();
    std::byte buf[8];
    auto n = co_await s.read_some(buf);
    co_return n ? std::error_code{} : n.error();
  }(pair->server, started));
  auto acceptor =
      rt_->spawn([](TcpListener& l, sched::test::Countdown& st) -> Task<std::error_code> {
        st.count_down();
        auto s = co_await l.accept();
        co_return s ? std::error_code{} : s.error();
      }(*listener, started));
  ASSERT_TRUE(started.wait());
  rt_->request_stop();
  EXPECT_EQ(reader.join_blocking(), std::errc::operation_canceled);
  EXPECT_EQ(acceptor.join_blocking(), std::errc::operation_canceled);
}

// With one worker, a task spawned by a running task runs only once that task suspends, so
// the close below always meets a read that is already pending.
TEST_P(SocketTest, CloseCompletesAPendingReadWithOperationCanceled) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    auto closer = r.spawn([](TcpStream& s) -> Task<void> {
      s.close();
      co_return;
    }(pair->server));
    std::byte buf[8];
    auto n = co_await pair->server.read_some(buf);
    co_await std::move(closer);
    if (n) co_return "read succeeded";
    if (n.error() != std::errc::operation_canceled) co_return n.error().message();
    auto again = co_await pair->server.read_some(buf);  // after close: an error, not a crash
    co_return !again && again.error() == std::errc::bad_file_descriptor ? "ok" : "after close";
  };
  EXPECT_EQ(rt->block_on(body(*rt)), "ok");
}

// Shutting down the read side ends a read already pending with end of stream, as POSIX does,
// and leaves the write side working: the HTTP server's graceful drain (read) and its idle sweeper
// (both) stop connections that way, from another task. With one worker, the spawned task runs
// only once the read is pending.
TEST_P(SocketTest, ShutdownReadEndsAPendingRead) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r, io::ShutdownHow how) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    auto shutter = r.spawn([](TcpStream& s, io::ShutdownHow h) -> Task<std::error_code> {
      co_return io::shutdown(s.native_handle(), h);
    }(pair->server, how));
    std::byte buf[8];
    auto n = co_await pair->server.read_some(buf);
    if (auto shut = co_await std::move(shutter)) co_return "shutdown: " + shut.message();
    if (!n) co_return "pending read: " + n.error().message();
    if (*n != 0) co_return "pending read: " + std::to_string(*n) + " bytes";
    auto again = co_await pair->server.read_some(buf);
    if (!again || *again != 0) co_return "a later read is not end of stream";
    if (how == io::ShutdownHow::both) co_return "ok";
    const std::byte x{42};
    if (!co_await pair->server.write_all({&x, 1})) co_return "write after shutdown(read)";
    std::byte got{};
    if (!co_await pair->client.read_exact({&got, 1}) || got != x) co_return "peer read";
    co_return "ok";
  };
  EXPECT_EQ(rt->block_on(body(*rt, io::ShutdownHow::read)), "ok");
  EXPECT_EQ(rt->block_on(body(*rt, io::ShutdownHow::both)), "ok");
  if (GetParam().starts_with("iocp")) {  // Windows left the reads pending: shutdown() ended them
    EXPECT_GE(rt->engine().counters().get("reissues"), 2u);
  }
}

// Bytes that repeat nowhere within any realistic transfer (unlike i * 7 + 3, which repeats
// every 256 bytes, so a lost or repeated block of a multiple of 256 bytes compares equal).
Bytes unique_bytes(std::size_t size) {
  Bytes data(size);
  for (std::size_t i = 0; i < size; ++i) {
    std::uint64_t x = (i / 8 + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64 of the word index
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    data[i] = static_cast<std::byte>(x >> (8 * (i % 8)));
  }
  return data;
}

// shutdown(write) shuts the write side only: a read already pending on the same socket waits
// on, and gets the peer's bytes (intact) and then its end of stream. On Windows io::shutdown()
// now cancels every call on the socket, the receive too, and the engine must issue it again.
// With one worker, the spawned task runs only once the read is pending.
TEST_P(SocketTest, ShutdownWriteLeavesAPendingReadWaiting) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r, bool readiness) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    auto other = r.spawn([](Pair& p) -> Task<std::string> {
      if (auto shut = p.server.shutdown_write(); !shut)
        co_return "shutdown: " + shut.error().message();
      std::byte end[1];
      auto eof = co_await p.client.read_some(end);  // the server's FIN
      if (!eof || *eof != 0) co_return "the peer did not see the end of stream";
      if (!co_await p.client.write_all(bytes_of("after the shutdown"))) co_return "peer write";
      if (!p.client.shutdown_write()) co_return "peer shutdown";
      co_return "ok";
    }(*pair));
    Bytes got;
    std::byte buf[64];
    if (readiness) {  // the zero-byte "readable" call pending across the shutdown
      if (auto ready = co_await pair->server.readable(); !ready)
        co_return "readable: " + ready.error().message();
    }
    for (;;) {
      auto n = co_await pair->server.read_some(buf);
      if (!n) co_return "pending read: " + n.error().message();
      if (*n == 0) break;
      got.insert(got.end(), buf, buf + *n);
    }
    if (auto o = co_await std::move(other); o != "ok") co_return o;
    if (got != bytes_of("after the shutdown"))
      co_return "read " + std::to_string(got.size()) + " bytes, not the peer's 18";
    co_return "ok";
  };
  EXPECT_EQ(rt->block_on(body(*rt, false)), "ok");
  EXPECT_EQ(rt->block_on(body(*rt, true)), "ok");
  if (GetParam().starts_with("iocp")) {  // the pending calls were cancelled and issued again
    EXPECT_GE(rt->engine().counters().get("reissues"), 2u);
  }
}

// shutdown(write) while a write waits for room (the peer reads nothing yet): the write ends
// with broken_pipe instead of waiting forever, and the peer reads exactly the bytes the writer
// was told were written, in order, none lost, none twice (a pattern that never repeats), then an
// orderly end of stream (not a reset). The shutdown runs only once bytes reached the peer, so
// the write is pending then: Windows (and wine) leave a send pending across shutdown(SD_SEND)
// unless io::shutdown() cancels it, and a cancelled send that moved bytes must report them.
TEST_P(SocketTest, ShutdownWriteEndsAPendingWriteAndThePeerGetsWhatWasReported) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    static const Bytes data = unique_bytes(32 << 20);
    auto writer = r.spawn([](TcpStream& s) -> Task<Result<std::size_t>> {
      std::size_t sent = 0;
      while (sent < data.size()) {
        auto n = co_await s.write_some(std::span(data).subspan(sent));
        if (!n) {
          if (n.error() != std::errc::broken_pipe) co_return n.error();
          co_return sent;
        }
        sent += *n;
      }
      co_return sent;
    }(pair->server));
    if (auto ready = co_await pair->client.readable(); !ready)
      co_return "readable: " + ready.error().message();
    auto shutter = r.spawn(
        [](TcpStream& s) -> Task<Result<void>> { co_return s.shutdown_write(); }(pair->server));
    if (auto shut = co_await std::move(shutter); !shut)
      co_return "shutdown: " + shut.error().message();
    auto sent = co_await std::move(writer);
    if (!sent) co_return "write: " + sent.error().message();
    if (*sent == data.size()) co_return "every byte was written although shut down";
    std::size_t got = 0;
    Bytes buf(256 << 10);
    for (;;) {
      auto n = co_await pair->client.read_some(buf);
      if (!n) co_return "peer read after " + std::to_string(got) + ": " + n.error().message();
      if (*n == 0) break;
      if (got + *n > data.size()) co_return "more bytes than exist";
      if (std::memcmp(buf.data(), data.data() + got, *n) != 0)
        co_return "wrong bytes at " + std::to_string(got);
      got += *n;
    }
    if (got != *sent)
      co_return "the peer read " + std::to_string(got) + " bytes, the writes reported " +
          std::to_string(*sent);
    co_return "ok";
  };
  EXPECT_EQ(rt->block_on(body(*rt)), "ok");
}

// Stress, two workers: while the peer streams bytes, another task shuts the write side down
// again and again (each call cancels the pending receive on Windows, which the engine issues
// again, racing the bytes' arrival). The reader must see every byte once, in order.
TEST_P(SocketTest, RepeatedShutdownWriteWhileReadingLosesNoByte) {
  auto rt = test::make_runtime(GetParam(), 2);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    static const Bytes data = unique_bytes(4 << 20);
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto writer = r.spawn([](TcpStream& s) -> Task<bool> {
      std::mt19937 rng(7);
      for (std::size_t at = 0; at < data.size();) {
        const std::size_t n = std::min<std::size_t>(data.size() - at, 1 + rng() % 3000);
        if (!co_await s.write_all(std::span(data).subspan(at, n))) co_return false;
        at += n;
        if (rng() % 8 == 0) co_await yield();
      }
      co_return s.shutdown_write().has_value();
    }(pair->client));
    auto shutter =
        r.spawn([](TcpStream& s, std::shared_ptr<std::atomic<bool>> stop) -> Task<std::size_t> {
          std::size_t calls = 0;
          // Bounded: on uring-rings an unbounded loop of shutdown + yield slows the reader down
          // a hundredfold (each shutdown wakes the pending receive for nothing).
          while (!stop->load() && calls < 5'000) {
            (void)s.shutdown_write();
            ++calls;
            co_await yield();
          }
          co_return calls;
        }(pair->server, done));
    std::size_t got = 0;
    std::string failure;
    std::byte buf[1500];
    for (;;) {
      auto n = co_await pair->server.read_some(buf);
      if (!n) {
        failure = "read after " + std::to_string(got) + ": " + n.error().message();
        break;
      }
      if (*n == 0) break;
      if (got + *n > data.size()) {
        failure = "more bytes than were written";
        break;
      }
      if (std::memcmp(buf, data.data() + got, *n) != 0) {
        failure = "wrong bytes at " + std::to_string(got);
        break;
      }
      got += *n;
    }
    done->store(true);
    const std::size_t calls = co_await std::move(shutter);
    if (!co_await std::move(writer) && failure.empty()) failure = "write";
    if (!failure.empty()) co_return failure + " (" + std::to_string(calls) + " shutdowns)";
    if (got != data.size())
      co_return "read " + std::to_string(got) + " of " + std::to_string(data.size()) + " bytes";
    co_return "ok";
  };
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    EXPECT_EQ(rt->block_on(body(*rt)), "ok");
  }
  // On iocp, how often a shutdown met a pending receive (cancelled and issued again).
  RecordProperty("reissues", std::to_string(rt->engine().counters().get("reissues")));
}

// readable() waits for data without taking any: the bytes are all there for the read after it,
// whether they arrived while it waited (one worker: the writer runs only once it is pending)
// or were already there.
TEST_P(SocketTest, ReadableWaitsForDataAndConsumesNothing) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    auto writer = r.spawn([](TcpStream& s) -> Task<bool> {
      co_return (co_await s.write_all(bytes_of("ping"))).has_value();
    }(pair->client));
    auto ready = co_await pair->server.readable();
    if (!co_await std::move(writer)) co_return "write";
    if (!ready) co_return "readable: " + ready.error().message();
    auto again = co_await pair->server.readable();  // the bytes are still there: at once
    if (!again) co_return "readable again: " + again.error().message();
    Bytes got(4);
    if (!co_await pair->server.read_exact(got)) co_return "read";
    co_return got == bytes_of("ping") ? "ok" : "bytes changed";
  };
  EXPECT_EQ(rt->block_on(body(*rt)), "ok");
}

// `size` bytes of a pattern seeded by `seed`, written by a task of their own from one end of a
// fresh pair while `read` takes them at the other, one readable() at a time (it waits, then
// appends what it reads to `got`; false on an error or an early end). True if every byte
// arrived, in order.
Task<bool> write_whole(TcpStream& s, const Bytes& data) {
  co_return (co_await s.write_all(data)).has_value();
}

template <class Read>
Task<bool> stream_arrives_whole(Runtime& rt, std::size_t size, std::size_t seed, Read read) {
  auto pair = co_await connected_pair(rt);
  if (!pair) co_return false;
  Bytes data(size);
  for (std::size_t i = 0; i < size; ++i)
    data[i] = static_cast<std::byte>((i * 131) ^ (i >> 9) ^ seed);
  auto writing = rt.spawn(write_whole(pair->client, data));
  Bytes got;
  got.reserve(size);
  while (got.size() < size)
    if (!co_await read(pair->server, got)) co_return false;
  co_return co_await std::move(writing) && got == data;
}

// One readable(), then try_read_some until it finds nothing: how a server that waits holding
// no buffer reads (http::Server does).
Task<bool> readable_then_try_read(TcpStream& s, Bytes& got) {
  if (!co_await s.readable()) co_return false;
  std::byte buf[509];
  for (;;) {
    auto n = s.try_read_some(buf);
    if (!n && n.error() == std::errc::resource_unavailable_try_again) co_return true;
    if (!n || *n == 0) co_return false;
    got.insert(got.end(), buf, buf + *n);
  }
}

// Alternating readable() and small reads over a long stream loses and reorders nothing (with
// io_uring's multishot receive, readable() must leave what it saw buffered for the read).
TEST_P(SocketTest, ReadableThenReadOverALongStreamKeepsEveryByte) {
  auto small_read = [](TcpStream& s, Bytes& got) -> Task<bool> {
    if (!co_await s.readable()) co_return false;
    std::byte buf[61];
    auto n = co_await s.read_some(buf);
    if (!n || *n == 0) co_return false;
    got.insert(got.end(), buf, buf + *n);
    co_return true;
  };
  EXPECT_TRUE(run(stream_arrives_whole(*rt_, 256u << 10, 0, small_read)));
}

// try_read_some never waits: nothing there is try_again (and costs the stream nothing), bytes
// that came are taken, the peer's end is 0, and a closed stream is bad_file_descriptor.
TEST_P(SocketTest, TryReadTakesWhatIsThereAndNeverWaits) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair";
    std::byte buf[16];
    auto none = pair->server.try_read_some(buf);
    if (none || none.error() != std::errc::resource_unavailable_try_again)
      co_return "before any bytes: " + (none ? std::to_string(*none) : none.error().message());
    if (!co_await pair->client.write_all(bytes_of("ping"))) co_return "write";
    Bytes got;
    while (got.size() < 4) {
      if (!co_await pair->server.readable()) co_return "readable";
      auto n = pair->server.try_read_some(buf);
      if (!n && n.error() == std::errc::resource_unavailable_try_again) continue;  // stale
      if (!n || *n == 0) co_return "try_read_some after readable";
      got.insert(got.end(), buf, buf + *n);
    }
    if (got != bytes_of("ping")) co_return "bytes changed";
    auto drained = pair->server.try_read_some(buf);
    if (drained || drained.error() != std::errc::resource_unavailable_try_again)
      co_return "after the bytes: not try_again";
    auto empty = pair->server.try_read_some(std::span<std::byte>());
    if (!empty || *empty != 0) co_return "an empty buffer";
    if (!pair->client.shutdown_write()) co_return "shutdown";
    for (;;) {
      if (!co_await pair->server.readable()) co_return "readable at the end";
      auto end = pair->server.try_read_some(buf);
      if (!end && end.error() == std::errc::resource_unavailable_try_again) continue;
      if (!end || *end != 0) co_return "the end is not 0";
      break;
    }
    pair->server.close();
    auto closed = pair->server.try_read_some(buf);
    if (closed || closed.error() != std::errc::bad_file_descriptor)
      co_return "closed: not bad_file_descriptor";
    co_return "ok";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

// readable() and try_read_some over a long stream, as a server that waits holding no buffer
// reads: every byte, in order (with io_uring's multishot receive, a try must take the bytes
// the multishot holds before any still in the socket).
TEST_P(SocketTest, ReadableThenTryReadOverALongStreamKeepsEveryByte) {
  EXPECT_TRUE(run(stream_arrives_whole(*rt_, 256u << 10, 0, &readable_then_try_read)));
}

// The same over many streams at once, their writers ahead of their readers: with io_uring's
// multishot receive, each socket's buffered chunks reach its bound (the multishot is throttled)
// and together they empty the ring's provided buffers (-ENOBUFS: readable() falls back to a
// poll and try_read_some to a direct receive). Every stream still gets every byte, in order.
TEST_P(SocketTest, ReadableThenTryReadOnManyStreamsAtOnceKeepsEveryByte) {
  constexpr int kStreams = 96;
  auto body = [](Runtime& rt) -> Task<int> {
    std::vector<Task<bool>> streams;
    for (int k = 0; k < kStreams; ++k)
      streams.push_back(stream_arrives_whole(rt, 128u << 10, static_cast<std::size_t>(k),
                                             &readable_then_try_read));
    auto results = co_await when_all(std::move(streams));
    co_return static_cast<int>(std::count(results.begin(), results.end(), true));
  };
  EXPECT_EQ(run(body(*rt_)), kStreams);
}

// The peer's end makes the socket readable (the read then gives 0), and closing the socket
// ends a pending readable() with operation_canceled.
TEST_P(SocketTest, ReadableSeesTheEndAndIsCancelledByClose) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    auto closer = r.spawn([](TcpStream& s) -> Task<void> {
      s.close();
      co_return;
    }(pair->client));
    auto ready = co_await pair->server.readable();
    co_await std::move(closer);
    if (!ready) co_return "readable at the end: " + ready.error().message();
    std::byte buf[8];
    auto n = co_await pair->server.read_some(buf);
    if (!n || *n != 0) co_return "the read after it is not end of stream";

    auto second = co_await connected_pair(r);
    if (!second) co_return "pair 2";
    auto closer2 = r.spawn([](TcpStream& s) -> Task<void> {
      s.close();
      co_return;
    }(second->server));
    auto pending = co_await second->server.readable();
    co_await std::move(closer2);
    if (pending) co_return "readable succeeded on a closed socket";
    co_return pending.error() == std::errc::operation_canceled ? "ok" : pending.error().message();
  };
  EXPECT_EQ(rt->block_on(body(*rt)), "ok");
}

TEST_P(SocketTest, SecondConcurrentReadIsBusy) {
  auto rt = test::make_runtime(GetParam(), 1);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pair = co_await connected_pair(r);
    if (!pair) co_return "pair";
    auto second = r.spawn([](TcpStream& s) -> Task<std::error_code> {
      std::byte b[1];
      auto n = co_await s.read_some(b);
      s.close();  // releases the first reader
      co_return n ? std::error_code{} : n.error();
    }(pair->server));
    std::byte buf[8];
    auto first = co_await pair->server.read_some(buf);
    auto e = co_await std::move(second);
    if (e != std::errc::device_or_resource_busy) co_return "second: " + e.message();
    co_return !first && first.error() == std::errc::operation_canceled ? "ok" : "first";
  };
  EXPECT_EQ(rt->block_on(body(*rt)), "ok");
}

TEST_P(SocketTest, GatherWriteSendsBuffersInOrder) {
  auto body = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    std::vector<Bytes> parts;
    std::vector<io::ConstBuffer> views;
    Bytes expected;
    for (int i = 0; i < 100; ++i) {  // more buffers than one gather call takes
      parts.push_back(Bytes(static_cast<std::size_t>(i * 37 % 5000), std::byte(i)));
    }
    for (auto& p : parts) {
      views.push_back({p.data(), p.size()});
      expected.insert(expected.end(), p.begin(), p.end());
    }
    auto reader = [](TcpStream& s, std::size_t n) -> Task<Bytes> {
      Bytes got(n);
      if (!co_await s.read_exact(got)) got.clear();
      co_return got;
    };
    auto [w, got] =
        co_await when_all(pair->client.write_all(views), reader(pair->server, expected.size()));
    co_return w.has_value() && got == expected;
  };
  EXPECT_TRUE(run(body(*rt_)));
}

TEST_P(SocketTest, UdpRoundTrip) {
  auto body = [](Runtime& rt) -> Task<bool> {
    auto a = UdpSocket::bind(rt, Address::loopback_v4(0));
    auto b = UdpSocket::bind(rt, Address::loopback_v4(0));
    if (!a || !b) co_return false;
    const Address b_addr = *b->local_address();
    auto msg = bytes_of("datagram");
    if (!co_await a->send_to(msg, b_addr)) co_return false;
    std::byte buf[64];
    Address from;
    auto n = co_await b->receive_from(buf, from);
    co_return n&&* n == msg.size() && std::memcmp(buf, msg.data(), *n) == 0 &&
        from == *a->local_address();
  };
  EXPECT_TRUE(run(body(*rt_)));
}

TEST_P(SocketTest, Ipv6Loopback) {
  auto probe = io::open_socket(Address::loopback_v6(0), io::SocketType::tcp);
  if (!probe) GTEST_SKIP() << "no IPv6 here";
  const bool bound = !io::bind(*probe, Address::loopback_v6(0));
  io::close_handle(*probe);
  if (!bound) GTEST_SKIP() << "no ::1 here";
  auto body = [](Runtime& rt) -> Task<bool> {
    auto listener = TcpListener::bind(rt, Address::loopback_v6(0));
    if (!listener) co_return false;
    auto accepted = rt.spawn(listener->accept());
    auto client = co_await TcpStream::connect(rt, *listener->local_address());
    auto server = co_await std::move(accepted);
    co_return client&& server && client->peer_address()->is_v6();
  };
  EXPECT_TRUE(run(body(*rt_)));
}

#if !defined(_WIN32)
// Not on Windows: it has no per-process descriptor limit to lower (sockets fail with
// WSAENOBUFS only when the system runs out of memory), so EMFILE cannot be provoked there.
// Descriptor exhaustion: with RLIMIT_NOFILE lowered so accept() fails with EMFILE, the
// listener backs off (its retry timer is pending) instead of failing or spinning, and accepts
// every waiting connection once descriptors are available again.
TEST_P(SocketTest, AcceptBacksOffUnderEmfileAndRecovers) {
  constexpr int kClients = 8;
  auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  const Address address = *listener->local_address();
  // Clients connect with plain blocking sockets; the kernel completes their handshakes into
  // the backlog without any accept().
  std::vector<int> clients;
  for (int i = 0; i < kClients; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::connect(fd, static_cast<const sockaddr*>(address.native()), address.native_size()),
              0);
    clients.push_back(fd);
  }
  // While the limit is lowered the process has no descriptor to spare, the sanitizer runtimes'
  // included: UBSan's vptr check opens a pipe the first time it meets a dynamic type (a vtable
  // checked against a static type), and without one it reports a valid object as having an
  // invalid vptr and aborts the test. So that window may only run code that has run before it.
  // A rehearsal on this runtime runs the recovery path once with descriptors: an accept, a read,
  // a back-off sleep, the event items carrying them released by the workers (on io_uring the
  // EMFILE itself arrives as a completion, so the workers' first event items are released in the
  // window unless they were released here).
  auto rehearsal = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    std::byte b[1] = {std::byte{1}};
    if (!co_await pair->client.write_all(b) || !co_await pair->server.read_exact(b))
      co_return false;
    co_return (co_await sleep_for(1ms)).has_value();
  };
  ASSERT_TRUE(run(rehearsal(*rt_)));
  // Its sockets are closed by the engine (on io_uring by the poller, a moment later); their
  // descriptors must be free before the lowest free one is looked for below.
  ASSERT_TRUE(sched::test::eventually([&] { return rt_->engine().counters().descriptors == 1; }));
  // The two types only the EMFILE branch meets, the system error category and the log line's
  // format buffer, are met here by hand, through the same calls.
  const std::error_code warm(EMFILE, std::system_category());
  EXPECT_STRNE(warm.category().name(), "");
  arbor::log::warn("(test warm-up) accept: {}; backing off until descriptors are free",
                   warm.message());
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original), 0);
  // The lowest free descriptor number is where the next accept would land; allow none.
  const int probe = ::dup(0);
  ASSERT_GE(probe, 0);
  ::close(probe);
  rlimit lowered = original;
  lowered.rlim_cur = static_cast<rlim_t>(probe);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);

  auto server = rt_->spawn([](TcpListener& l) -> Task<std::vector<TcpStream>> {
    std::vector<TcpStream> accepted;
    while (accepted.size() < kClients) {
      auto s = co_await l.accept();
      if (!s) break;
      accepted.push_back(std::move(*s));
    }
    co_return accepted;
  }(*listener));
  // The accept loop is backing off once its retry sleep is pending.
  ASSERT_TRUE(sched::test::eventually([&] { return rt_->engine().counters().timers > 0; }));
  const auto waits_while_exhausted = rt_->engine().counters().waits;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &original), 0);
  auto accepted = server.join_blocking();
  ASSERT_EQ(accepted.size(), static_cast<std::size_t>(kClients));
  // Not spinning: the poller woke a bounded number of times (timer wake-ups, not millions).
  EXPECT_LT(rt_->engine().counters().waits - waits_while_exhausted, 10'000u);
  // The recovered connections work.
  for (int i = 0; i < kClients; ++i)
    ASSERT_EQ(::write(clients[static_cast<std::size_t>(i)], "x", 1), 1);
  auto check = [](std::vector<TcpStream>& streams) -> Task<int> {
    int ok = 0;
    for (auto& s : streams) {
      std::byte b[1];
      if (co_await s.read_exact(b)) ++ok;
    }
    co_return ok;
  };
  EXPECT_EQ(rt_->block_on(check(accepted)), kClients);
  for (int fd : clients)
    ::close(fd);
}
#endif  // !_WIN32

// The multishot paths (io_uring) keep what arrives before a reader asks: received bytes in
// provided buffers, accepted connections in a queue. These tests drive those paths and check
// nothing is lost or reordered; on the other engines they are ordinary socket tests.

bool multishot(const std::string& engine) {
  return engine == "uring";
}

TEST_P(SocketTest, SmallReadsTakeBufferedBytesInOrder) {
  constexpr std::size_t kTotal = 256u << 10;
  auto body = [](Runtime& rt) -> Task<bool> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return false;
    Bytes data(kTotal);
    for (std::size_t i = 0; i < kTotal; ++i)
      data[i] = static_cast<std::byte>((i * 131) ^ (i >> 9));
    auto writer = [](TcpStream& s, const Bytes& d) -> Task<bool> {
      co_return (co_await s.write_all(d)).has_value();
    };
    auto writing = rt.spawn(writer(pair->client, data));
    Bytes got;
    got.reserve(kTotal);
    std::byte buf[61];  // much smaller than a provided buffer: most reads take a remainder
    while (got.size() < kTotal) {
      auto n = co_await pair->server.read_some(buf);
      if (!n || *n == 0) co_return false;
      got.insert(got.end(), buf, buf + *n);
    }
    co_return co_await std::move(writing) && got == data;
  };
  EXPECT_TRUE(run(body(*rt_)));
  if (multishot(GetParam())) {
    const auto c = rt_->engine().counters();
    EXPECT_GT(c.get("multishot_arms"), 0u);
    EXPECT_GT(c.get("buffered_reads"), 0u);  // reads served on the worker, without a hand-off
  }
}

TEST_P(SocketTest, ConnectionsWaitingBeforeAcceptAreAllAccepted) {
  constexpr int kClients = 150;  // more than a listener queues before its multishot stops
  auto body = [](Runtime& rt) -> Task<int> {
    auto listener = TcpListener::bind(rt, Address::loopback_v4(0), {.backlog = 512});
    if (!listener) co_return -1;
    const Address a = *listener->local_address();
    std::vector<TcpStream> clients;
    for (int k = 0; k < kClients; ++k) {  // all connected (in the backlog) before any accept
      auto s = co_await TcpStream::connect(rt, a);
      if (!s) co_return -2;
      clients.push_back(std::move(*s));
    }
    int good = 0;
    for (int k = 0; k < kClients; ++k) {
      Address peer;
      auto s = co_await listener->accept(&peer);
      if (!s) co_return -3;
      if (!(peer == *s->peer_address())) co_return -4;
      const std::byte b{static_cast<unsigned char>(k)};
      if (!co_await s->write_all({&b, 1})) co_return -5;
      // Accepts come in connection order; each client gets its own byte back.
      std::byte r{};
      if (!co_await clients[static_cast<std::size_t>(k)].read_exact({&r, 1})) co_return -6;
      good += r == b;
    }
    co_return good;
  };
  EXPECT_EQ(run(body(*rt_)), kClients);
  if (multishot(GetParam())) {
    EXPECT_GT(rt_->engine().counters().get("buffered_reads"), 0u);
  }
}

TEST_P(SocketTest, EveryConnectionGetsItsBytesWhenReceiveBuffersRunOut) {
  // 100 sockets x 64 KiB waiting unread is more than the provided-buffer ring holds (1024 x
  // 4 KiB): some multishot receives end with ENOBUFS and their readers fall back.
  constexpr int kPairs = 100;
  constexpr std::size_t kBytes = 64 * 1024;
  auto body = [](Runtime& rt) -> Task<int> {
    std::vector<Pair> pairs;
    for (int k = 0; k < kPairs; ++k) {
      auto p = co_await connected_pair(rt);
      if (!p) co_return -1;
      pairs.push_back(std::move(*p));
    }
    auto first_byte = [](TcpStream& s) -> Task<bool> {  // a reader waits: arms the multishot
      std::byte b{};
      co_return (co_await s.read_exact({&b, 1})).has_value() && b == std::byte{0xab};
    };
    auto send = [](TcpStream& s, int k) -> Task<bool> {
      const std::byte tag{0xab};
      if (!co_await s.write_all({&tag, 1})) co_return false;
      Bytes payload(kBytes, static_cast<std::byte>(k));
      co_return (co_await s.write_all(payload)).has_value();
    };
    std::vector<Task<bool>> readers, writers;
    for (int k = 0; k < kPairs; ++k) {
      readers.push_back(first_byte(pairs[static_cast<std::size_t>(k)].server));
      writers.push_back(send(pairs[static_cast<std::size_t>(k)].client, k));
    }
    auto [r1, w1] = co_await when_all(when_all(std::move(readers)), when_all(std::move(writers)));
    if (std::count(r1.begin(), r1.end(), true) != kPairs) co_return -2;
    if (std::count(w1.begin(), w1.end(), true) != kPairs) co_return -3;
    auto rest = [](TcpStream& s, int k) -> Task<bool> {
      Bytes got(kBytes);
      if (!co_await s.read_exact(got)) co_return false;
      co_return std::all_of(got.begin(), got.end(),
                            [k](std::byte b) { return b == static_cast<std::byte>(k); });
    };
    std::vector<Task<bool>> finish;
    for (int k = 0; k < kPairs; ++k)
      finish.push_back(rest(pairs[static_cast<std::size_t>(k)].server, k));
    auto ok = co_await when_all(std::move(finish));
    co_return static_cast<int>(std::count(ok.begin(), ok.end(), true));
  };
  EXPECT_EQ(run(body(*rt_)), kPairs);
}

// The same with readers that wait with readable(), as an idle HTTP connection does: the first
// readable() arms the multishot receive, which then buffers all it can while nobody reads (the
// ring runs out: some receives end with ENOBUFS), and readable() and small reads after it
// alternate until every byte is in, none lost or moved.
TEST_P(SocketTest, ReadableReadersGetEveryByteWhenReceiveBuffersRunOut) {
  constexpr int kPairs = 100;
  constexpr std::size_t kBytes = 64 * 1024;
  auto body = [](Runtime& rt) -> Task<int> {
    std::vector<Pair> pairs;
    for (int k = 0; k < kPairs; ++k) {
      auto p = co_await connected_pair(rt);
      if (!p) co_return -1;
      pairs.push_back(std::move(*p));
    }
    auto ready = [](TcpStream& s) -> Task<bool> { co_return (co_await s.readable()).has_value(); };
    auto send = [](TcpStream& s, int k) -> Task<bool> {
      Bytes payload(kBytes, static_cast<std::byte>(k));
      co_return (co_await s.write_all(payload)).has_value();
    };
    std::vector<Task<bool>> waiters, writers;
    for (int k = 0; k < kPairs; ++k) {
      waiters.push_back(ready(pairs[static_cast<std::size_t>(k)].server));
      writers.push_back(send(pairs[static_cast<std::size_t>(k)].client, k));
    }
    auto [r1, w1] = co_await when_all(when_all(std::move(waiters)), when_all(std::move(writers)));
    if (std::count(r1.begin(), r1.end(), true) != kPairs) co_return -2;
    if (std::count(w1.begin(), w1.end(), true) != kPairs) co_return -3;
    auto reader = [](TcpStream& s, int k) -> Task<bool> {
      Bytes got;
      got.reserve(kBytes);
      std::byte buf[1000];
      while (got.size() < kBytes) {
        if (!co_await s.readable()) co_return false;
        auto n = co_await s.read_some(buf);
        if (!n || *n == 0) co_return false;
        got.insert(got.end(), buf, buf + *n);
      }
      co_return std::all_of(got.begin(), got.end(),
                            [k](std::byte b) { return b == static_cast<std::byte>(k); });
    };
    std::vector<Task<bool>> finish;
    for (int k = 0; k < kPairs; ++k)
      finish.push_back(reader(pairs[static_cast<std::size_t>(k)].server, k));
    auto ok = co_await when_all(std::move(finish));
    co_return static_cast<int>(std::count(ok.begin(), ok.end(), true));
  };
  EXPECT_EQ(run(body(*rt_)), kPairs);
}

TEST_P(SocketTest, ClosingWithBufferedBytesAndConnectionsReleasesEverything) {
  auto body = [](Runtime& rt) -> Task<bool> {
    auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
    if (!listener) co_return false;
    const Address a = *listener->local_address();
    auto c1 = co_await TcpStream::connect(rt, a);
    if (!c1) co_return false;
    auto s1 = co_await listener->accept();  // arms the listener's multishot
    if (!s1) co_return false;
    std::vector<TcpStream> waiting;  // connected, never accepted
    for (int k = 0; k < 5; ++k) {
      auto c = co_await TcpStream::connect(rt, a);
      if (!c) co_return false;
      waiting.push_back(std::move(*c));
    }
    const std::byte x{1};
    if (!co_await c1->write_all({&x, 1})) co_return false;
    std::byte b{};
    if (!co_await s1->read_exact({&b, 1})) co_return false;  // arms the stream's multishot
    Bytes more(50'000, std::byte{2});
    if (!co_await c1->write_all(more)) co_return false;  // buffered, never read
    s1->close();
    listener->close();
    // The closed listener's queued connections were closed: each client sees end of stream
    // (or a reset), never a hang.
    for (auto& c : waiting) {
      std::byte buf[1];
      auto n = co_await c.read_some(buf);
      if (n && *n != 0) co_return false;
    }
    co_return true;
  };
  EXPECT_TRUE(run(body(*rt_)));
  rt_->shutdown();
  EXPECT_EQ(rt_->engine().counters().descriptors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, SocketTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
