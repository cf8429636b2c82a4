// arbor::tls failing well, on every engine variant: handshakes that must fail (wrong host,
// expired, untrusted, no shared ALPN) and say why on the side that decided; a peer that closes
// without close_notify (truncated, never a silent end); renegotiation refused (an OpenSSL
// client on a thread of its own asks for it); garbage instead of a handshake and garbage
// records after one end in an error, never a crash or a hang; contexts given bad input.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <thread>
#include <vector>

#include "tls_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using test::TlsTcp;

class TlsFailureTest : public test::TlsEngineTest {
 protected:
  // Both sides' errors for a handshake that must fail.
  std::pair<std::error_code, std::error_code> failed(const tls::Context& client,
                                                     const tls::Context& server, std::string host) {
    auto pair = run(test::handshake_pair(*rt_, client, server, std::move(host)));
    return {pair.client.error(), pair.server.error()};
  }
};

TEST_P(TlsFailureTest, AWrongHostFailsVerification) {
  auto [client, server] = failed(test::client_context(), test::server_context(), "example.com");
  EXPECT_EQ(tls::verify_error(client), X509_V_ERR_HOSTNAME_MISMATCH) << client.message();
  EXPECT_NE(client.message().find("hostname mismatch"), std::string::npos) << client.message();
  EXPECT_TRUE(server);  // the server learns it failed, by the client's alert
}

TEST_P(TlsFailureTest, AnExpiredCertificateFailsVerification) {
  auto [client, server] =
      failed(test::client_context(), test::server_context("expired"), "localhost");
  EXPECT_EQ(tls::verify_error(client), X509_V_ERR_CERT_HAS_EXPIRED) << client.message();
  EXPECT_TRUE(server);
}

TEST_P(TlsFailureTest, AnUntrustedCertificateFailsVerification) {
  auto [client, server] =
      failed(test::client_context(), test::server_context("rogue"), "localhost");
  EXPECT_EQ(tls::verify_error(client), X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT) << client.message();
  EXPECT_TRUE(server);
  // And the same server is fine for a client that does not verify.
  auto lax = test::client_context();
  lax.set_verify(tls::Verify::none);
  auto ok = failed(lax, test::server_context("rogue"), "localhost");
  EXPECT_FALSE(ok.first) << ok.first.message();
  EXPECT_FALSE(ok.second) << ok.second.message();
}

TEST_P(TlsFailureTest, NoSharedAlpnFailsTheHandshake) {
  auto [client, server] = failed(test::client_context({"h2"}),
                                 test::server_context("localhost", {"http/1.1"}), "localhost");
  EXPECT_EQ(tls::openssl_reason(server), SSL_R_NO_APPLICATION_PROTOCOL) << server.message();
  EXPECT_NE(server.message().find("no application protocol"), std::string::npos);
  EXPECT_EQ(client.category(), tls::error_category()) << client.message();
}

TEST_P(TlsFailureTest, AMissingClientCertificateFailsMutualTls) {
  auto server = test::server_context();
  server.set_verify(tls::Verify::require_peer);
  ASSERT_TRUE(server.load_ca_file(test::certificates().file("ca.pem")));
  auto [client, served] = failed(test::client_context(), server, "localhost");
  EXPECT_EQ(tls::openssl_reason(served), SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
      << served.message();
}

TEST_P(TlsFailureTest, APeerClosingWithoutCloseNotifyIsTruncation) {
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::error_code> {
    auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
    if (!pair.client || !pair.server) co_return std::make_error_code(std::errc::protocol_error);
    if (!co_await pair.server->write_all(test::bytes_of("partial")))
      co_return std::make_error_code(std::errc::io_error);
    pair.server->next_layer().close();  // TCP FIN, no close_notify
    std::byte buffer[64];
    auto first = co_await pair.client->read_some(buffer);
    if (!first || *first != 7) co_return std::make_error_code(std::errc::io_error);
    auto next = co_await pair.client->read_some(buffer);
    co_return next.error();
  };
  const auto error = run(body(*rt_));
  EXPECT_EQ(error, tls::Errc::truncated) << error.message();
}

// A blocking OpenSSL client (TLS 1.2 at most, where renegotiation exists) on its own thread:
// it exchanges one message, asks to renegotiate, and reports OpenSSL's reason for what
// followed (0 if the renegotiation went through).
int renegotiating_client(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) return -1;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  int reason = -2;
  char echo[4];
  std::size_t n = 0;
  if (SSL_connect(ssl) == 1 && SSL_write(ssl, "ping", 4) == 4 &&
      SSL_read_ex(ssl, echo, 4, &n) == 1) {
    reason = 0;
    if (SSL_renegotiate(ssl) != 1 || SSL_do_handshake(ssl) != 1 ||
        SSL_read_ex(ssl, echo, 4, &n) != 1)
      reason = ERR_GET_REASON(ERR_peek_last_error());
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
  return reason;
}

TEST_P(TlsFailureTest, RenegotiationIsRefused) {
  auto server = test::server_context("localhost", {});
  auto body = [&](Runtime& rt) -> Task<std::string> {
    auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
    if (!listener) co_return "bind";
    int reason = -3;
    std::thread peer(
        [&, port = listener->local_address()->port()] { reason = renegotiating_client(port); });
    auto tcp = co_await listener->accept();
    if (!tcp) co_return "accept";
    auto accepting = tls::accept(server, std::move(*tcp));
    auto tls = co_await std::move(accepting);
    if (!tls) co_return "handshake: " + tls.error().message();
    std::string said = co_await test::echo(*tls);  // ends in an error: the client gives up
    peer.join();
    if (said == "ok") co_return "the echo ended cleanly";
    if (reason != SSL_R_NO_RENEGOTIATION) co_return "client reason " + std::to_string(reason);
    co_return "refused";
  };
  EXPECT_EQ(run(body(*rt_)), "refused");
}

// Random bytes where a ClientHello should be, then a record header promising a huge record,
// then garbage records after a good handshake: each ends in an error on the TLS side.
TEST_P(TlsFailureTest, GarbageEndsInAnErrorNotACrash) {
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& rt) -> Task<std::string> {
    std::mt19937 random(12345);
    for (int round = 0; round < 60; ++round) {
      auto pair = co_await test::connected_pair(rt);
      if (!pair) co_return "pair";
      std::vector<std::byte> junk(1 + random() % 4096);
      for (auto& b : junk)
        b = static_cast<std::byte>(random());
      if (round % 3 == 1) {  // a plausible header: handshake record, TLS 1.2, length 0xFFFF
        const unsigned char header[] = {0x16, 0x03, 0x03, 0xff, 0xff};
        for (std::size_t i = 0; i < sizeof header && i < junk.size(); ++i)
          junk[i] = static_cast<std::byte>(header[i]);
      }
      auto accepting = rt.spawn(tls::accept(server, std::move(pair->server)));
      (void)co_await pair->client.write_all(junk);
      pair->client.close();  // a record promised and not all sent must end in truncation
      auto served = co_await with_timeout(5s, std::move(accepting));
      if (served) co_return "garbage handshake accepted in round " + std::to_string(round);
      if (served.error() == std::errc::timed_out)
        co_return "hang in round " + std::to_string(round);
      // And the client side: garbage from a "server".
      auto pair2 = co_await test::connected_pair(rt);
      if (!pair2) co_return "pair";
      auto connecting = rt.spawn(tls::connect(client, std::move(pair2->client), "localhost"));
      std::byte hello[512];
      (void)co_await pair2->server.read_some(hello);
      (void)co_await pair2->server.write_all(junk);
      pair2->server.close();
      auto connected = co_await std::move(connecting);
      if (connected) co_return "garbage server accepted";
    }
    // After a good handshake: records with garbage in them.
    for (int round = 0; round < 20; ++round) {
      auto pair = co_await test::handshake_pair(rt, client, server, "localhost");
      if (!pair.client || !pair.server) co_return "handshake";
      std::vector<std::byte> junk(5 + random() % 2048);
      for (auto& b : junk)
        b = static_cast<std::byte>(random());
      const unsigned char header[] = {0x17, 0x03, 0x03};
      for (std::size_t i = 0; i < sizeof header; ++i)
        junk[i] = static_cast<std::byte>(header[i]);
      const std::size_t body_size = junk.size() - 5;
      junk[3] = static_cast<std::byte>(body_size >> 8);
      junk[4] = static_cast<std::byte>(body_size & 0xff);
      (void)co_await pair.client->next_layer().write_all(junk);
      std::byte buffer[256];
      auto r = co_await pair.server->read_some(buffer);
      if (r) co_return "garbage record read as data";
      if (r.error().category() != tls::error_category())
        co_return "not a TLS error: " + r.error().message();
      auto again = co_await pair.server->read_some(buffer);
      if (again.error() != tls::Errc::not_usable) co_return "usable after a failure";
    }
    co_return "ok";
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

INSTANTIATE_TEST_SUITE_P(Engines, TlsFailureTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

// Bad input to a context: a clear error, with the reason.
TEST(TlsContext, BadInputGivesClearErrors) {
  ASSERT_EQ(test::certificates().error, "");
  const auto& certs = test::certificates();
  auto ctx = tls::Context::server();
  ASSERT_TRUE(ctx);
  auto missing = ctx->use_certificate_chain_file(certs.file("nope.pem"));
  ASSERT_FALSE(missing);
  EXPECT_FALSE(missing.error().message().empty());
  auto text = ctx->use_certificate_chain("not a certificate");
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().category(), tls::error_category()) << text.error().message();
  ASSERT_TRUE(ctx->use_certificate_chain_file(certs.file("localhost.pem")));
  auto mismatch = ctx->use_private_key_file(certs.file("other.key"));
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message().find("key values mismatch"), std::string::npos)
      << mismatch.error().message();
  EXPECT_EQ(ctx->set_alpn({""}).error(), std::errc::invalid_argument);
  EXPECT_FALSE(ctx->set_ciphers("NO-SUCH-CIPHER"));
  auto client = tls::Context::client();
  ASSERT_TRUE(client);
  EXPECT_FALSE(client->load_ca("garbage"));
}

}  // namespace
}  // namespace arbor
