// Shared by the HTTPS suites: the server's and the client's TLS contexts over the test CA
// (tests/tls/certificates.hpp), and a client byte stream that can hold back what TLS writes.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>

#include "../tls/certificates.hpp"
#include "arbor/arbor.hpp"
#include "arbor/tls.hpp"

namespace arbor::http::https_test {

/// A server context with the test certificate for localhost, offering ALPN http/1.1.
inline std::shared_ptr<const tls::Context> server_tls() {
  const auto& certs = test::certificates();
  EXPECT_EQ(certs.error, "");
  auto ctx = tls::Context::server();
  EXPECT_TRUE(ctx);
  EXPECT_TRUE(ctx->use_certificate_chain_file(certs.file("localhost.pem")));
  EXPECT_TRUE(ctx->use_private_key_file(certs.file("localhost.key")));
  EXPECT_TRUE(ctx->set_alpn({"http/1.1"}));
  return std::make_shared<const tls::Context>(std::move(*ctx));
}

/// Verifies the server against the test CA, offering h2 first (the server must pick http/1.1).
inline tls::Context client_tls() {
  auto ctx = tls::Context::client();
  EXPECT_TRUE(ctx);
  EXPECT_TRUE(ctx->load_ca_file(test::certificates().file("ca.pem")));
  EXPECT_TRUE(ctx->set_alpn({"h2", "http/1.1"}));
  return std::move(*ctx);
}

inline std::span<const std::byte> bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A client's byte stream that, while corked, keeps what TLS writes instead of sending it: two
// records then leave in one send, and reach the server in one read.
struct Corked {
  TcpStream* socket;
  std::string* kept;  // non-null: corked
  auto read_some(std::span<std::byte> into) { return socket->read_some(into); }
  Task<Result<std::size_t>> write_some(std::span<const std::byte> from) {
    if (kept == nullptr) co_return co_await socket->write_some(from);
    kept->append(reinterpret_cast<const char*>(from.data()), from.size());
    co_return from.size();
  }
};

}  // namespace arbor::http::https_test
