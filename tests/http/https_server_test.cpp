// http::Server with ServerOptions::tls (HTTPS), in process, on every engine: requests over a
// verified tls::Stream client (keep-alive, pipelining, a body, ALPN), close_notify on a close of
// the server's choosing, and what a bad client gets: plain HTTP to the TLS port, a silent or
// stalled handshake (header_timeout), a peer gone without close_notify, shutdown() with TLS
// connections open. Certificates are made at test time (tests/tls/certificates.hpp); the
// example server's --tls-cert and --tls-key: https_example_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../runtime/runtime_support.hpp"
#include "../sched/test_support.hpp"
#include "../tls/certificates.hpp"
#include "arbor/http/server.hpp"
#include "arbor/tls.hpp"
#include "http_client.hpp"
#include "https_support.hpp"

namespace arbor::http {
namespace {

using namespace std::chrono_literals;
using TlsTcp = tls::Stream<TcpStream>;
using namespace https_test;

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra + "\r\n";
}

// The bodies of `count` responses read from `s` (fewer if the stream ended or failed first).
template <class S>
Task<std::vector<std::string>> read_bodies(tls::Stream<S>& s, std::size_t count) {
  std::vector<std::string> bodies;
  std::string in;
  std::vector<std::byte> chunk(16 * 1024);
  while (bodies.size() < count) {
    const auto end = in.find("\r\n\r\n");
    if (end != std::string::npos) {
      const auto at = in.find("Content-Length: ");
      const std::size_t length = at < end ? std::stoul(in.substr(at + 16)) : 0;
      if (in.size() >= end + 4 + length) {
        bodies.push_back(in.substr(end + 4, length));
        in.erase(0, end + 4 + length);
        continue;
      }
    }
    auto n = co_await with_timeout(10s, s.read_some(chunk));
    if (!n || *n == 0) break;
    in.append(reinterpret_cast<const char*>(chunk.data()), *n);
  }
  co_return bodies;
}

class HttpsServer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(test::certificates().error, "");
    rt_ = test::make_runtime(GetParam());
    ASSERT_TRUE(rt_);
    client_ = std::make_unique<tls::Context>(client_tls());
  }
  void TearDown() override {
    if (server_ == nullptr) return;
    server_->shutdown();
    running_.join_blocking();
    EXPECT_EQ(server_->counters().connections_active, 0u);
    EXPECT_EQ(server_->counters().buffers_lent, 0u);
  }
  void start(ServerOptions options = {}) {
    options.listen = Address::loopback_v4(0);
    options.tls = server_tls();
    auto server = Server::bind(*rt_, options, [](const Request& r, std::span<char>) -> Reply {
      if (r.method == "POST") return {200, "application/octet-stream", r.body, {}};
      return {200, "text/plain", "Hello, World!", {}};
    });
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    running_ = rt_->spawn(server_->run());
  }
  int port() const { return server_->local_address().port(); }
  // A handshaken client connection, verified as "localhost".
  Result<TlsTcp> connect() {
    return rt_->block_on([](Runtime& rt, const tls::Context& ctx,
                            int port) -> Task<Result<TlsTcp>> {
      auto tcp =
          co_await TcpStream::connect(rt, Address::loopback_v4(static_cast<std::uint16_t>(port)));
      if (!tcp) co_return tcp.error();
      co_return co_await tls::connect(ctx, std::move(*tcp), "localhost");
    }(*rt_, *client_, port()));
  }
  Result<void> send(TlsTcp& s, const std::string& data) {
    return rt_->block_on(s.write_all(bytes(data)));
  }
  template <class S>
  std::vector<std::string> bodies(tls::Stream<S>& s, std::size_t count) {
    return rt_->block_on(read_bodies(s, count));
  }
  // The next read's outcome: "close_notify", "truncated", an error's message, or the bytes.
  std::string next_read(TlsTcp& s) {
    return rt_->block_on([](TlsTcp& stream) -> Task<std::string> {
      std::vector<std::byte> b(1024);
      auto n = co_await with_timeout(10s, stream.read_some(b));
      if (!n) co_return n.error() == tls::Errc::truncated ? "truncated" : n.error().message();
      if (*n == 0) co_return "close_notify";
      co_return std::string(reinterpret_cast<const char*>(b.data()), *n);
    }(s));
  }

  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<tls::Context> client_;
  std::unique_ptr<Server> server_;
  JoinHandle<void> running_;
  TcpStream socket_;  // a Corked client's socket
};

// GET over a verified connection, keep-alive, a pipelined batch, a POST body, ALPN; then a
// "Connection: close" ends it with close_notify (the client reads a clean end, not truncated).
TEST_P(HttpsServer, AnswersOverTlsWithKeepAlivePipeliningAndBodies) {
  start();
  auto c = connect();
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->alpn(), "http/1.1");
  for (int i = 0; i < 3; ++i) {  // one connection, one request at a time
    ASSERT_TRUE(send(*c, get("/plaintext")));
    EXPECT_EQ(bodies(*c, 1), std::vector<std::string>{"Hello, World!"}) << "request " << i;
  }
  ASSERT_TRUE(send(*c, get("/plaintext") + get("/plaintext") + get("/plaintext")));
  EXPECT_EQ(bodies(*c, 3), std::vector<std::string>(3, "Hello, World!"));
  const std::string body(100'000, 'b');  // larger than the input buffer: a body buffer
  ASSERT_TRUE(send(*c, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body));
  EXPECT_EQ(bodies(*c, 1), std::vector<std::string>{body});
  ASSERT_TRUE(send(*c, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello"));
  EXPECT_EQ(bodies(*c, 1), std::vector<std::string>{"hello"});
  ASSERT_TRUE(send(*c, get("/plaintext", "Connection: close\r\n")));
  EXPECT_EQ(bodies(*c, 1), std::vector<std::string>{"Hello, World!"});
  EXPECT_EQ(next_read(*c), "close_notify");
  const auto counters = server_->counters();
  EXPECT_EQ(counters.requests, 9u);
  EXPECT_EQ(counters.tls_handshakes_failed, 0u);
  EXPECT_EQ(counters.connections_total, 1u);
}

// Two requests in two TLS records that arrive in one read: the second is buffered in the TLS
// layer when the first is answered, so the connection must read on rather than park (its
// socket has nothing more to say, and parked, it would wait for ever).
TEST_P(HttpsServer, ARecordBufferedInTheTlsLayerIsServedWithoutParking) {
  start();
  std::string kept;
  auto c = rt_->block_on([](Runtime& rt, const tls::Context& ctx, int port,
                            TcpStream& socket) -> Task<Result<tls::Stream<Corked>>> {
    auto tcp =
        co_await TcpStream::connect(rt, Address::loopback_v4(static_cast<std::uint16_t>(port)));
    if (!tcp) co_return tcp.error();
    socket = std::move(*tcp);
    co_return co_await tls::connect(ctx, Corked{&socket, nullptr}, "localhost");
  }(*rt_, *client_, port(), socket_));
  ASSERT_TRUE(c) << c.error().message();
  // Corked: each write_all below makes its own record, kept here.
  c->next_layer().kept = &kept;
  ASSERT_TRUE(rt_->block_on(c->write_all(bytes(get("/one")))));
  ASSERT_TRUE(rt_->block_on(c->write_all(bytes(get("/two")))));
  c->next_layer().kept = nullptr;
  ASSERT_TRUE(rt_->block_on(socket_.write_all(bytes(kept))));
  EXPECT_EQ(bodies(*c, 2), std::vector<std::string>(2, "Hello, World!"));
  EXPECT_EQ(server_->counters().requests, 2u);
}

// Keep-alive connections go idle (parked, no buffer) between requests like plain ones, and
// wake for the next request.
TEST_P(HttpsServer, IdleTlsConnectionsHoldNoBufferAndWakeForTheNextRequest) {
  start();
  std::vector<TlsTcp> clients;
  for (int i = 0; i < 4; ++i) {
    auto c = connect();
    ASSERT_TRUE(c) << c.error().message();
    ASSERT_TRUE(send(*c, get("/plaintext")));
    ASSERT_EQ(bodies(*c, 1).size(), 1u);
    clients.push_back(std::move(*c));
  }
  ASSERT_TRUE(sched::test::eventually([&] {
    const auto k = server_->counters();
    return k.buffers_lent == 0 && k.connections_idle == 4;
  })) << server_->counters().buffers_lent
      << " lent, " << server_->counters().connections_idle << " idle";
  for (auto& c : clients) {
    ASSERT_TRUE(send(c, get("/plaintext")));
    EXPECT_EQ(bodies(c, 1), std::vector<std::string>{"Hello, World!"});
  }
  EXPECT_EQ(server_->counters().requests, 8u);
}

// A client speaking plain HTTP to the TLS port: the handshake fails, the connection closes
// with no HTTP answer, and the server goes on serving TLS clients.
TEST_P(HttpsServer, PlainHttpToTheTlsPortIsClosedAndOthersAreServed) {
  start();
  http_test::Client plain(port());
  ASSERT_TRUE(plain.connected());
  ASSERT_TRUE(plain.send(get("/plaintext")));
  const std::string got = plain.read_all();
  EXPECT_EQ(got.find("HTTP/1.1"), std::string::npos) << got;
  ASSERT_TRUE(sched::test::eventually([&] {
    return server_->counters().tls_handshakes_failed == 1 &&
           server_->counters().connections_active == 0;
  }));
  auto c = connect();
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_TRUE(send(*c, get("/plaintext")));
  EXPECT_EQ(bodies(*c, 1), std::vector<std::string>{"Hello, World!"});
  EXPECT_EQ(server_->counters().requests, 1u);
}

// A client that connects and sends nothing, and one that stops mid-ClientHello, are cut by
// header_timeout (the idle timeout, far longer, is not what ends them).
TEST_P(HttpsServer, SilentAndStalledHandshakesAreCutByHeaderTimeout) {
  ServerOptions options;
  // 1 s, not less: the connection that checks the server still serves must finish its handshake
  // and send within it too (200 ms failed on a loaded machine under ASan at -O0).
  options.header_timeout = 1s;
  options.idle_timeout = 60s;
  start(options);
  const auto began = std::chrono::steady_clock::now();
  http_test::Client silent(port());
  http_test::Client stalled(port());
  ASSERT_TRUE(silent.connected() && stalled.connected());
  // A handshake record's header promising 512 bytes, and 4 of them.
  ASSERT_TRUE(stalled.send(std::string("\x16\x03\x01\x02\x00\x01\x00\x01", 8)));
  EXPECT_TRUE(silent.closed_by_server());
  EXPECT_TRUE(stalled.closed_by_server());
  EXPECT_LT(std::chrono::steady_clock::now() - began, 30s);
  ASSERT_TRUE(sched::test::eventually([&] {
    const auto k = server_->counters();
    return k.timeouts == 2 && k.tls_handshakes_failed == 2 && k.connections_active == 0;
  })) << server_->counters().timeouts
      << " timeouts";
  auto c = connect();  // and the server still serves
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_TRUE(send(*c, get("/plaintext")));
  EXPECT_EQ(bodies(*c, 1).size(), 1u);
}

// A peer that goes away without close_notify, mid-request: the connection just ends; nothing
// is answered or counted as a request, and the server carries on.
TEST_P(HttpsServer, APeerGoneWithoutCloseNotifyMidRequestEndsItsConnectionOnly) {
  start();
  {
    auto c = connect();
    ASSERT_TRUE(c) << c.error().message();
    ASSERT_TRUE(send(*c, "GET /plaintext HTTP/1.1\r\nHo"));
    ASSERT_TRUE(sched::test::eventually([&] { return server_->counters().buffers_lent == 1; }));
    c->next_layer().close();  // no close_notify
  }
  ASSERT_TRUE(sched::test::eventually([&] { return server_->counters().connections_active == 0; }));
  auto k = server_->counters();
  EXPECT_EQ(k.requests, 0u);
  EXPECT_EQ(k.timeouts, 0u);
  EXPECT_EQ(k.buffers_lent, 0u);
  EXPECT_EQ(k.tls_handshakes_failed, 0u);
  auto c = connect();
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_TRUE(send(*c, get("/plaintext")));
  EXPECT_EQ(bodies(*c, 1).size(), 1u);
  EXPECT_EQ(server_->counters().requests, 1u);
}

// shutdown() with TLS connections idle, mid-request and mid-handshake: run() returns, and
// every one of them ends.
TEST_P(HttpsServer, ShutdownWithTlsConnectionsOpenCompletes) {
  start();
  auto idle = connect();
  ASSERT_TRUE(idle) << idle.error().message();
  ASSERT_TRUE(send(*idle, get("/plaintext")));
  ASSERT_EQ(bodies(*idle, 1).size(), 1u);
  auto partial = connect();
  ASSERT_TRUE(partial) << partial.error().message();
  ASSERT_TRUE(send(*partial, "GET /plaintext HTTP/1.1\r\nHo"));
  http_test::Client handshaking(port());
  ASSERT_TRUE(handshaking.send(std::string("\x16\x03\x01\x02\x00\x01\x00\x01", 8)));
  ASSERT_TRUE(sched::test::eventually([&] { return server_->counters().connections_active == 3; }));
  server_->shutdown();
  running_.join_blocking();
  EXPECT_EQ(server_->counters().connections_active, 0u);
  EXPECT_NE(next_read(*idle), "Hello, World!");
  const std::string left = handshaking.read_all();  // until the server closes it
  EXPECT_EQ(left.find("HTTP/1.1"), std::string::npos) << left;
  server_.reset();  // TearDown has nothing left to stop
}

INSTANTIATE_TEST_SUITE_P(Engines, HttpsServer, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

// bind() refuses a client context: a server needs its certificate.
TEST(HttpsServerApi, BindRefusesAClientContext) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  options.tls = std::make_shared<const tls::Context>(client_tls());
  auto server = Server::bind(rt, options, [](const Request&, std::span<char>) { return Reply{}; });
  ASSERT_FALSE(server);
  EXPECT_EQ(server.error(), std::errc::invalid_argument);
}

}  // namespace
}  // namespace arbor::http
