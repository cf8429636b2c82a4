// Helpers for the TLS tests: contexts from the test certificates, and a handshake between a
// client and a server stream over a fresh loopback TCP connection.
// Invariant: every helper starts and ends its own peers; nothing outlives the call but the
// streams it returns.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "../runtime/runtime_support.hpp"
#include "arbor/arbor.hpp"
#include "arbor/tls.hpp"
#include "certificates.hpp"

namespace arbor::test {

using TlsTcp = tls::Stream<TcpStream>;

inline tls::Context server_context(const std::string& name = "localhost",
                                   std::vector<std::string> alpn = {"http/1.1"}) {
  const auto& certs = certificates();
  auto ctx = tls::Context::server();
  EXPECT_TRUE(ctx);
  EXPECT_TRUE(ctx->use_certificate_chain_file(certs.file(name + ".pem")));
  EXPECT_TRUE(ctx->use_private_key_file(certs.file(name + ".key")));
  EXPECT_TRUE(ctx->set_alpn(alpn));
  return std::move(*ctx);
}

inline tls::Context client_context(std::vector<std::string> alpn = {"http/1.1"}) {
  auto ctx = tls::Context::client();
  EXPECT_TRUE(ctx);
  EXPECT_TRUE(ctx->load_ca_file(certificates().file("ca.pem")));
  EXPECT_TRUE(ctx->set_alpn(alpn));
  return std::move(*ctx);
}

struct Handshaken {
  Result<TlsTcp> client;
  Result<TlsTcp> server;
};

/// Both handshakes over one loopback connection, each side's result as it came out.
inline Task<Handshaken> handshake_pair(Runtime& rt, const tls::Context& client,
                                       const tls::Context& server, std::string host) {
  auto pair = co_await connected_pair(rt);
  if (!pair) co_return Handshaken{pair.error(), pair.error()};
  auto accepted = rt.spawn(tls::accept(server, std::move(pair->server)));
  auto connected = co_await tls::connect(client, std::move(pair->client), host);
  auto served = co_await std::move(accepted);
  co_return Handshaken{std::move(connected), std::move(served)};
}

inline std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> b(s.size());
  for (std::size_t i = 0; i < s.size(); ++i)
    b[i] = static_cast<std::byte>(s[i]);
  return b;
}

inline std::string text_of(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

/// Echoes until the peer's close_notify, then sends its own. "ok" or what went wrong.
template <class S>
Task<std::string> echo(tls::Stream<S>& stream) {
  std::vector<std::byte> buffer(64 * 1024);
  for (;;) {
    auto n = co_await stream.read_some(buffer);
    if (!n) co_return "echo read: " + n.error().message();
    if (*n == 0) break;
    auto w = co_await stream.write_all({buffer.data(), *n});
    if (!w) co_return "echo write: " + w.error().message();
  }
  auto s = co_await stream.shutdown();
  if (!s) co_return "echo shutdown: " + s.error().message();
  co_return "ok";
}

// The TLS suites' fixture: parameterised over engine variants, a runtime per test, and the
// test certificates made (once per process).
class TlsEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(certificates().error, "");
    rt_ = make_runtime(GetParam());
    ASSERT_TRUE(rt_);
  }
  template <class T>
  T run(Task<T> task) {
    return rt_->block_on(std::move(task));
  }
  std::unique_ptr<Runtime> rt_;
};

}  // namespace arbor::test
