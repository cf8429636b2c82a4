// TLS throughput over loopback on one arbor runtime: bytes one way through a TLS stream, and
// the same through plain TCP, so the cost of TLS is read beside the socket's. A figure for
// docs/benchmarks.md, not a test.
//
//   build/release/perf/tls_stream [MiB=1024] [write KiB=256]
//   ARBOR_ENGINE=epoll ARBOR_WORKERS=2 build/release/perf/tls_stream 1024 256
//
// One client task writes `MiB` in `write KiB` pieces; one server task reads until the end.
// Certificates (P-256, TLS 1.3, AES-128-GCM or whatever OpenSSL prefers; printed) are made in
// a temporary directory with the openssl tool, as the tests make theirs.
#include <openssl/ssl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../tests/tls/certificates.hpp"
#include "arbor/arbor.hpp"
#include "arbor/tls.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  arbor::TcpStream client, server;
};

arbor::Task<arbor::Result<Pair>> connect_pair(arbor::Runtime& rt) {
  auto listener = arbor::TcpListener::bind(rt, arbor::Address::loopback_v4(0));
  if (!listener) co_return listener.error();
  auto accepted = rt.spawn(listener->accept());
  auto client = co_await arbor::TcpStream::connect(rt, *listener->local_address());
  auto server = co_await std::move(accepted);
  if (!client) co_return client.error();
  if (!server) co_return server.error();
  co_return Pair{std::move(*client), std::move(*server)};
}

template <class S>
arbor::Task<std::size_t> drain(S& stream) {
  std::vector<std::byte> buffer(256 * 1024);
  std::size_t total = 0;
  for (;;) {
    auto n = co_await stream.read_some(buffer);
    if (!n || *n == 0) break;
    total += *n;
  }
  co_return total;
}

template <class S>
arbor::Task<bool> pour(S& stream, std::size_t total, std::size_t piece) {
  std::vector<std::byte> buffer(piece, std::byte{42});
  for (std::size_t sent = 0; sent < total; sent += piece) {
    auto w = co_await stream.write_all(buffer);
    if (!w) co_return false;
  }
  co_return true;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

arbor::Task<int> run(arbor::Runtime& rt, std::size_t total, std::size_t piece) {
  const auto& certs = arbor::test::certificates();
  if (!certs.error.empty()) {
    std::fprintf(stderr, "certificates: %s\n", certs.error.c_str());
    co_return 1;
  }
  auto server_ctx = arbor::tls::Context::server();
  auto client_ctx = arbor::tls::Context::client();
  if (!server_ctx || !client_ctx ||
      !server_ctx->use_certificate_chain_file(certs.file("localhost.pem")) ||
      !server_ctx->use_private_key_file(certs.file("localhost.key")) ||
      !client_ctx->load_ca_file(certs.file("ca.pem")))
    co_return 1;

  {  // plain TCP
    auto pair = co_await connect_pair(rt);
    if (!pair) co_return 1;
    auto start = Clock::now();
    auto reading = rt.spawn(drain(pair->server));
    const bool ok = co_await pour(pair->client, total, piece);
    pair->client.close();
    const std::size_t got = co_await std::move(reading);
    const double s = seconds_since(start);
    std::printf("tcp  %zu MiB in %.3f s: %.0f MiB/s%s\n", total >> 20, s, (got >> 20) / s,
                ok && got == total ? "" : " (INCOMPLETE)");
  }
  {  // TLS
    auto pair = co_await connect_pair(rt);
    if (!pair) co_return 1;
    auto accepting = rt.spawn(arbor::tls::accept(*server_ctx, std::move(pair->server)));
    auto connecting = arbor::tls::connect(*client_ctx, std::move(pair->client), "localhost");
    auto client = co_await std::move(connecting);
    auto server = co_await std::move(accepting);
    if (!client || !server) co_return 1;
    const char* cipher = SSL_get_cipher_name(client->native_handle());
    auto start = Clock::now();
    auto reading = rt.spawn(drain(*server));
    const bool ok = co_await pour(*client, total, piece);
    (void)co_await client->shutdown();
    const std::size_t got = co_await std::move(reading);
    const double s = seconds_since(start);
    std::printf("tls  %zu MiB in %.3f s: %.0f MiB/s (%s %s)%s\n", total >> 20, s, (got >> 20) / s,
                std::string(client->version()).c_str(), cipher,
                ok && got == total ? "" : " (INCOMPLETE)");
  }
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const std::size_t kib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  arbor::Runtime rt;
  return rt.block_on(run(rt, mib << 20, kib << 10));
}
