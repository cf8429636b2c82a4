// HTTPS at the server's edges: the drain (close_notify to idle connections, a handshake that
// completes while draining), eviction of TLS connections at max_connections, and the sweeper
// cutting many handshakes midway. The server and its clients run on two runtimes, so a blocked
// server worker does not block the clients. From an adversarial review of the HTTPS server.
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/runtime_support.hpp"
#include "../tls/certificates.hpp"
#include "arbor/http/server.hpp"
#include "arbor/tls.hpp"
#include "http_client.hpp"
#include "https_support.hpp"

namespace arbor::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using TlsTcp = tls::Stream<TcpStream>;
using namespace https_test;

// Polls with a sleep (the suite's eventually() spins, which two shared cores do not like).
bool soon(const std::function<bool()>& condition, std::chrono::milliseconds limit = 10s) {
  const auto until = Clock::now() + limit;
  while (!condition()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

const std::string kGet = "GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n";

// The next read's outcome: "close_notify", "truncated", an error's message, or the bytes.
template <class S>
Task<std::string> next_read(tls::Stream<S>& stream) {
  std::vector<std::byte> b(16 * 1024);
  auto n = co_await with_timeout(15s, stream.read_some(b));
  if (!n) co_return n.error() == tls::Errc::truncated ? "truncated" : n.error().message();
  if (*n == 0) co_return "close_notify";
  co_return std::string(reinterpret_cast<const char*>(b.data()), *n);
}

class HttpsEdges : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(test::certificates().error, "");
    client_ = std::make_unique<tls::Context>(client_tls());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->shutdown();
      running_.join_blocking();
    }
  }
  // The server on its own runtime (`workers` workers), the clients on another (crt_), so a
  // blocked server worker does not block the clients.
  void start(ServerOptions options = {}, int workers = 2, std::chrono::milliseconds drain = 5s) {
    srt_ = test::make_runtime(GetParam(), workers);
    crt_ = test::make_runtime(GetParam(), 2);
    ASSERT_TRUE(srt_ && crt_);
    options.listen = Address::loopback_v4(0);
    options.tls = server_tls();
    auto server = Server::bind(*srt_, options, [this](const Request& r, std::span<char>) {
      if (r.path == "/block") {  // holds its worker until released
        entered_ = true;
        while (!release_)
          std::this_thread::sleep_for(1ms);
      }
      return Reply{200, "text/plain", "Hello, World!", {}};
    });
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    running_ = srt_->spawn(server_->run(drain));
  }
  std::uint16_t port() const { return server_->local_address().port(); }
  Result<TlsTcp> connect() {
    return crt_->block_on(
        [](Runtime& rt, const tls::Context& ctx, std::uint16_t port) -> Task<Result<TlsTcp>> {
          auto tcp = co_await TcpStream::connect(rt, Address::loopback_v4(port));
          if (!tcp) co_return tcp.error();
          co_return co_await tls::connect(ctx, std::move(*tcp), "localhost");
        }(*crt_, *client_, port()));
  }
  // A request and its whole answer (one small response) on `c`.
  template <class S>
  std::string round_trip(tls::Stream<S>& c) {
    if (!crt_->block_on(c.write_all(bytes(kGet)))) return "write failed";
    return crt_->block_on(next_read(c));
  }
  ServerCounters k() const { return server_->counters(); }

  std::unique_ptr<Runtime> srt_, crt_;
  std::unique_ptr<tls::Context> client_;
  std::unique_ptr<Server> server_;
  JoinHandle<void> running_;
  std::atomic<bool> entered_{false}, release_{false};
};

// Would catch: an idle (parked) HTTPS connection ended by the drain without close_notify (its
// reads shut down, it woke to an end of stream, and OpenSSL answered that with a fatal
// decode_error alert): the drain is a close of the server's choosing, and says so.
TEST_P(HttpsEdges, DrainSendsCloseNotifyToAnIdleParkedConnection) {
  start();
  auto c = connect();
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_NE(round_trip(*c).find("Hello, World!"), std::string::npos);
  ASSERT_TRUE(soon([&] { return k().buffers_lent == 0 && k().connections_idle == 1; }));
  server_->shutdown();
  EXPECT_EQ(crt_->block_on(next_read(*c)), "close_notify");
  running_.join_blocking();
  server_.reset();
}

// A stream whose writes raise a flag once they are done: the ClientHello is then in the
// server's socket (loopback delivers within the send).
struct Flagged {
  TcpStream* socket;
  std::atomic<bool>* written;
  auto read_some(std::span<std::byte> into) { return socket->read_some(into); }
  Task<Result<std::size_t>> write_some(std::span<const std::byte> from) {
    auto n = co_await socket->write_some(from);
    written->store(true);
    co_return n;
  }
};

// Would catch: a handshake that completes after shutdown() (its ClientHello was waiting when
// shutdown() looked, so its reads were left open, as a plain connection's with a request
// waiting) parking as if not draining: nothing comes back to it, so a client that sends no
// request holds run() to the drain's deadline (60 s here; the fix closes it at once).
TEST_P(HttpsEdges, AHandshakeCompletingDuringTheDrainIsClosedNotParked) {
  start({}, /*workers=*/1, /*drain=*/60s);
  // A: accepted and parked before its ClientHello.
  auto a_tcp = crt_->block_on(TcpStream::connect(*crt_, Address::loopback_v4(port())));
  ASSERT_TRUE(a_tcp);
  ASSERT_TRUE(soon([&] { return k().connections_active == 1; }));
  // B: its request blocks the server's only worker.
  auto b = connect();
  ASSERT_TRUE(b) << b.error().message();
  ASSERT_TRUE(crt_->block_on(b->write_all(bytes("GET /block HTTP/1.1\r\nHost: x\r\n\r\n"))));
  ASSERT_TRUE(soon([&] { return entered_.load(); }));
  // A's ClientHello reaches the server's socket while no worker can read it...
  std::atomic<bool> hello_sent{false};
  auto a_stream = tls::Stream<Flagged>::make(*client_, Flagged{&*a_tcp, &hello_sent}, "localhost");
  ASSERT_TRUE(a_stream);
  auto a = crt_->spawn(a_stream->handshake());
  ASSERT_TRUE(soon([&] { return hello_sent.load(); }));
  server_->shutdown();  // ...so shutdown() sees it readable and leaves A's reads open
  const auto released = Clock::now();
  release_ = true;
  auto handshake = a.join_blocking();
  ASSERT_TRUE(handshake) << handshake.error().message();  // the handshake completed
  running_.join_blocking();
  const auto took = Clock::now() - released;
  EXPECT_LT(took, 30s) << "run() returned "
                       << std::chrono::duration_cast<std::chrono::seconds>(took).count()
                       << " s after the release: held to the drain's deadline";
  // Ended, not left open: close_notify, or (multishot io_uring, whose ClientHello was taken
  // before the drain looked) an alert or a truncation; never a read that times out.
  const std::string end = crt_->block_on(next_read(*a_stream));
  EXPECT_EQ(end.find("timed out"), std::string::npos) << end;
  EXPECT_FALSE(end.empty());
  server_.reset();
}

// Would catch: eviction at max_connections taking a connection mid-handshake (idle_since 0:
// it is not idle) rather than refusing the newcomer; and a parked, handshaken one not evicted.
TEST_P(HttpsEdges, EvictionTakesParkedTlsConnectionsNotHandshakingOnes) {
  ServerOptions options;
  options.max_connections = 1;
  options.header_timeout = 3s;
  start(options);
  {
    http_test::Client handshaking(port());
    ASSERT_TRUE(handshaking.send(std::string("\x16\x03\x01\x02\x00\x01\x00\x01", 8)));
    ASSERT_TRUE(soon([&] { return k().connections_active == 1; }));
    auto refused = connect();
    EXPECT_FALSE(refused);
    EXPECT_EQ(k().connections_rejected, 1u);
    EXPECT_EQ(k().connections_evicted, 0u);
  }
  ASSERT_TRUE(soon([&] { return k().connections_active == 0; }));
  auto first = connect();
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_NE(round_trip(*first).find("Hello"), std::string::npos);
  ASSERT_TRUE(soon([&] { return k().connections_idle == 1; }));
  auto second = connect();
  ASSERT_TRUE(second) << second.error().message();
  EXPECT_NE(round_trip(*second).find("Hello"), std::string::npos);
  EXPECT_EQ(k().connections_evicted, 1u);
  EXPECT_EQ(crt_->block_on(next_read(*first)), "truncated");  // evicted: abortive, by design
}

// Would catch: a connection, buffer or count left behind when the sweeper cuts many handshakes
// midway (each stalled after a whole ClientHello, the server waiting for the client's Finished).
TEST_P(HttpsEdges, ManyHandshakesCutMidwayByTheSweeperEndCleanly) {
  ServerOptions options;
  options.header_timeout = 1s;  // the last connection's handshake must fit in it too
  start(options);
  std::vector<std::unique_ptr<http_test::Client>> clients;
  // A real ClientHello, from a client stream kept corked.
  std::string hello;
  {
    TcpStream unused;
    auto s = tls::Stream<Corked>::make(*client_, Corked{&unused, &hello}, "localhost");
    ASSERT_TRUE(s);
    (void)crt_->block_on(with_timeout(200ms, s->handshake()));  // writes the hello, then waits
  }
  ASSERT_FALSE(hello.empty());
  for (int i = 0; i < 64; ++i) {
    clients.push_back(std::make_unique<http_test::Client>(port()));
    ASSERT_TRUE(clients.back()->send(hello));
  }
  ASSERT_TRUE(soon([&] { return k().connections_total == 64 && k().connections_active == 0; }, 10s))
      << k().connections_total << " accepted, " << k().connections_active << " left";
  EXPECT_EQ(k().timeouts, 64u);
  EXPECT_EQ(k().tls_handshakes_failed, 64u);
  EXPECT_EQ(k().buffers_lent, 0u);
  auto c = connect();
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_NE(round_trip(*c).find("Hello"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Engines, HttpsEdges, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor::http
