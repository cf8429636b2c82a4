// arbor::tls on every engine variant: a handshake with ALPN and SNI, an echo and a graceful
// close both ways; TLS over a Unix socket pair; certificates and CAs from memory; a
// per-name certificate; a client certificate; session resumption; a read cancelled by a deadline
// that leaves the stream usable; a large transfer through a TLS echo, intact (64 MiB on every
// variant, 1 GiB on the defaults); many concurrent handshakes. Certificates are made at test time
// with the openssl tool (certificates.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "tls_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using test::TlsTcp;

class TlsTest : public test::TlsEngineTest {};

// A client writes, reads the echo, shuts down; the server echoes until close_notify and
// sends its own; the client then reads the end of the stream (0), not an error.
template <class S>
Task<std::string> talk(Runtime& rt, tls::Stream<S> client, tls::Stream<S> server) {
  auto echoing = rt.spawn(test::echo(server));
  const auto hello = test::bytes_of("hello over tls");
  if (auto w = co_await client.write_all(hello); !w) co_return "write: " + w.error().message();
  std::vector<std::byte> back(hello.size());
  if (auto r = co_await client.read_exact(back); !r) co_return "read: " + r.error().message();
  if (back != hello) co_return "echo differs: " + test::text_of(back);
  if (auto s = co_await client.shutdown(); !s) co_return "shutdown: " + s.error().message();
  std::byte rest[16];
  auto end = co_await client.read_some(rest);
  if (!end) co_return "after close_notify: " + end.error().message();
  if (*end != 0) co_return "data after the echo";
  auto served = co_await std::move(echoing);
  co_return served;
}

TEST_P(TlsTest, HandshakesWithAlpnAndSniEchoesAndClosesGracefully) {
  auto server = test::server_context();
  auto client = test::client_context({"h2", "http/1.1"});
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client) co_return "client: " + pair.client.error().message();
    if (!pair.server) co_return "server: " + pair.server.error().message();
    if (pair.client->alpn() != "http/1.1" || pair.server->alpn() != "http/1.1")
      co_return "alpn " + std::string(pair.client->alpn());
    if (pair.server->server_name() != "localhost") co_return "sni";
    if (pair.client->version() != "TLSv1.3") co_return "version";
    co_return co_await talk(rt, std::move(*pair.client), std::move(*pair.server));
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

// A read smaller than a record leaves its rest decrypted inside the stream, which no socket
// readiness would announce: has_buffered_input() says so until it is read.
TEST_P(TlsTest, HasBufferedInputWhileARecordIsPartlyRead) {
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client) co_return "client: " + pair.client.error().message();
    if (!pair.server) co_return "server: " + pair.server.error().message();
    if (pair.server->has_buffered_input()) co_return "buffered input before any was sent";
    const auto sent = test::bytes_of("abcdef");
    if (auto w = co_await pair.client->write_all(sent); !w) co_return w.error().message();
    std::vector<std::byte> part(2);
    if (auto r = co_await pair.server->read_exact(part); !r) co_return r.error().message();
    if (!pair.server->has_buffered_input()) co_return "4 bytes left, none said buffered";
    std::vector<std::byte> rest(4);
    if (auto r = co_await pair.server->read_exact(rest); !r) co_return r.error().message();
    if (test::text_of(part) + test::text_of(rest) != "abcdef") co_return "bytes differ";
    if (pair.server->has_buffered_input()) co_return "buffered input after all was read";
    co_return "ok";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(TlsTest, VerifiesAnIpAddressAgainstTheCertificate) {
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "127.0.0.1");
    if (!pair.client) co_return "client: " + pair.client.error().message();
    if (!pair.server) co_return "server: " + pair.server.error().message();
    if (!pair.server->server_name().empty()) co_return "an IP address was sent as SNI";
    co_return "ok";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(TlsTest, RunsOverAUnixSocketPairWithCertificatesFromMemory) {
  const auto& certs = test::certificates();
  auto server = tls::Context::server();
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->use_certificate_chain(certs.read(certs.file("localhost.pem"))));
  ASSERT_TRUE(server->use_private_key(certs.read(certs.file("localhost.key"))));
  auto client = tls::Context::client();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->load_ca(certs.read(certs.file("ca.pem"))));
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = UnixStream::pair(rt);
    if (!pair) co_return "pair: " + pair.error().message();
    auto accepted = rt.spawn(tls::accept(*server, std::move(pair->second)));
    auto connected = co_await tls::connect(*client, std::move(pair->first), "localhost");
    auto served = co_await std::move(accepted);
    if (!connected) co_return "client: " + connected.error().message();
    if (!served) co_return "server: " + served.error().message();
    if (!connected->alpn().empty()) co_return "alpn without asking";
    co_return co_await talk(rt, std::move(*connected), std::move(*served));
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(TlsTest, ServesAPerNameCertificate) {
  auto other = test::server_context("other");
  auto server = test::server_context();
  server.on_server_name([&](std::string_view name) -> const tls::Context* {
    return name == "other.test" ? &other : nullptr;
  });
  auto client = test::client_context();
  auto body = [&](Runtime& rt, std::string host) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, host);
    if (!pair.client) co_return "client: " + pair.client.error().message();
    if (!pair.server) co_return "server: " + pair.server.error().message();
    if (pair.server->server_name() != host) co_return "sni";
    co_return "ok";
  };
  // Each name verifies only if the server chose the certificate for it.
  EXPECT_EQ(run(body(*rt_, "other.test")), "ok");
  EXPECT_EQ(run(body(*rt_, "localhost")), "ok");
}

TEST_P(TlsTest, AcceptsAClientCertificateWhenRequired) {
  const auto& certs = test::certificates();
  auto server = test::server_context();
  server.set_verify(tls::Verify::require_peer);
  ASSERT_TRUE(server.load_ca_file(certs.file("ca.pem")));
  auto client = test::client_context();
  ASSERT_TRUE(client.use_certificate_chain_file(certs.file("other.pem")));
  ASSERT_TRUE(client.use_private_key_file(certs.file("other.key")));
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client) co_return "client: " + pair.client.error().message();
    if (!pair.server) co_return "server: " + pair.server.error().message();
    // TLS 1.3 checks the client's certificate after the client's handshake ends: an exchange
    // shows the server accepted it.
    co_return co_await talk(rt, std::move(*pair.client), std::move(*pair.server));
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(TlsTest, ResumesASessionWithTheSameHost) {
  auto server = test::server_context();
  auto client = test::client_context();
  client.enable_resumption(4);
  auto once = [&](Runtime& rt) -> Task<Result<bool>> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client) co_return pair.client.error();
    if (!pair.server) co_return pair.server.error();
    const bool resumed = pair.client->resumed();
    // TLS 1.3 tickets come after the handshake: an exchange lets the client read them.
    auto said = co_await talk(rt, std::move(*pair.client), std::move(*pair.server));
    if (said != "ok") co_return std::make_error_code(std::errc::protocol_error);
    co_return resumed;
  };
  auto first = run(once(*rt_));
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_FALSE(*first);
  auto second = run(once(*rt_));
  ASSERT_TRUE(second) << second.error().message();
  EXPECT_TRUE(*second);
}

TEST_P(TlsTest, ATimedOutReadLeavesTheStreamUsable) {
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client || !pair.server) co_return "handshake";
    std::byte buffer[64];
    auto idle = co_await with_timeout(30ms, pair.client->read_some(buffer));
    if (idle || idle.error() != std::errc::timed_out) co_return "no timeout";
    const auto late = test::bytes_of("late");
    if (!co_await pair.server->write_all(late)) co_return "server write";
    std::vector<std::byte> got(late.size());
    auto r = co_await pair.client->read_exact(got);
    if (!r) co_return "read after the timeout: " + r.error().message();
    co_return test::text_of(got);
  };
  EXPECT_EQ(run(body(*rt_)), "late");
}

TEST_P(TlsTest, ASecondConcurrentOperationIsBusy) {
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client || !pair.server) co_return "handshake";
    // Two reads race for an idle stream: whichever starts second is refused at once (busy)
    // and wins the race; the other, waiting for data, is cancelled by when_any, cleanly.
    std::vector<Task<Result<std::size_t>>> reads;
    std::byte a[16], b[16];
    reads.push_back(pair.client->read_some(a));
    reads.push_back(pair.client->read_some(b));
    auto [index, first] = co_await when_any(std::move(reads));
    if (first || first.error() != tls::Errc::busy) co_return "the winner was not busy";
    if (!co_await pair.server->write_all(test::bytes_of("x"))) co_return "write";
    auto got = co_await pair.client->read_some(a);
    if (!got || *got != 1) co_return "no read after the race";
    co_return "ok";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

// A pattern that shows a lost, repeated or reordered byte: each 8-byte word is its offset.
void fill(std::span<std::byte> chunk, std::uint64_t offset) {
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    const std::uint64_t at = offset + i;
    chunk[i] = static_cast<std::byte>((at / 8) >> (8 * (at % 8)));
  }
}

TEST_P(TlsTest, CarriesALargeTransferThroughAnEchoIntact) {
  constexpr std::size_t kTotal = 64u << 20;  // 64 MiB each way
  constexpr std::size_t kChunk = 256u << 10;
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client || !pair.server) co_return "handshake";
    auto echoing = rt.spawn(test::echo(*pair.server));
    std::vector<std::byte> out(kChunk), in(kChunk), want(kChunk);
    for (std::size_t offset = 0; offset < kTotal; offset += kChunk) {
      fill(out, offset);
      auto w = co_await pair.client->write_all(out);
      if (!w) co_return "write: " + w.error().message();
      auto r = co_await pair.client->read_exact(in);
      if (!r) co_return "read: " + r.error().message();
      if (in != out) co_return "corrupt at " + std::to_string(offset);
    }
    if (!co_await pair.client->shutdown()) co_return "shutdown";
    co_return co_await std::move(echoing);
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

// 1 GiB each way through a TLS echo, on the runtime's defaults (the engine and io mode a user
// gets), checked byte by byte against its offset. A tls::Stream runs one operation at a time,
// so the client writes a chunk and reads its echo, as the 64 MiB test above does.
TEST(TlsGibibyte, CarriesOneGibibyteThroughAnEchoIntact) {
  ASSERT_EQ(test::certificates().error, "");
  constexpr std::uint64_t kTotal = std::uint64_t{1} << 30;
  constexpr std::size_t kChunk = 1u << 20;
  auto rt = Runtime::create(RuntimeOptions{});
  ASSERT_TRUE(rt) << rt.error().message();
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& r) -> Task<std::string> {
    auto pair = co_await test::handshake_pair(r, client, server, "localhost");
    if (!pair.client || !pair.server) co_return "handshake";
    auto echoing = r.spawn(test::echo(*pair.server));
    std::vector<std::byte> out(kChunk), in(kChunk);
    for (std::uint64_t offset = 0; offset < kTotal; offset += kChunk) {
      fill(out, offset);
      if (auto w = co_await pair.client->write_all(out); !w)
        co_return "write: " + w.error().message();
      if (auto got = co_await pair.client->read_exact(in); !got)
        co_return "read: " + got.error().message();
      if (in != out) co_return "corrupt in the chunk at " + std::to_string(offset);
    }
    if (!co_await pair.client->shutdown()) co_return "shutdown";
    std::byte rest[16];
    auto end = co_await pair.client->read_some(rest);
    if (!end || *end != 0) co_return "no orderly end after the echo";
    co_return co_await std::move(echoing);
  };
  EXPECT_EQ((*rt)->block_on(body(**rt)), "ok");
}

TEST_P(TlsTest, ManyConcurrentHandshakes) {
  constexpr int kClients = 64;
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
    if (!listener) co_return "bind";
    const Address at = *listener->local_address();
    auto serve = [&](TcpStream tcp) -> Task<std::string> {
      auto tls = co_await tls::accept(server, std::move(tcp));
      if (!tls) co_return "accept: " + tls.error().message();
      co_return co_await test::echo(*tls);
    };
    auto accept_all = [&]() -> Task<std::string> {
      std::vector<JoinHandle<std::string>> sessions;
      for (int i = 0; i < kClients; ++i) {
        auto tcp = co_await listener->accept();
        if (!tcp) co_return "tcp accept";
        sessions.push_back(rt.spawn(serve(std::move(*tcp))));
      }
      for (auto& s : sessions) {
        auto said = co_await std::move(s);
        if (said != "ok") co_return said;
      }
      co_return "ok";
    };
    auto one = [&](int i) -> Task<std::string> {
      auto tcp = co_await TcpStream::connect(rt, at);
      if (!tcp) co_return "connect";
      auto tls = co_await tls::connect(client, std::move(*tcp), "localhost");
      if (!tls) co_return "handshake: " + tls.error().message();
      const auto mine = test::bytes_of("client " + std::to_string(i));
      if (!co_await tls->write_all(mine)) co_return "write";
      std::vector<std::byte> back(mine.size());
      if (!co_await tls->read_exact(back)) co_return "read";
      if (back != mine) co_return "mixed up";
      if (!co_await tls->shutdown()) co_return "shutdown";
      co_return "ok";
    };
    auto server_side = rt.spawn(accept_all());
    std::vector<JoinHandle<std::string>> clients;
    for (int i = 0; i < kClients; ++i)
      clients.push_back(rt.spawn(one(i)));
    for (auto& c : clients) {
      auto said = co_await std::move(c);
      if (said != "ok") co_return said;
    }
    co_return co_await std::move(server_side);
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

INSTANTIATE_TEST_SUITE_P(Engines, TlsTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
