// arbor::asio::Stream on every engine variant, with Asio alone (no Beast): exact byte counts,
// the peer's end, close and cancel while pending, a second read refused, handlers never
// called inside the initiating call, and boost::asio::ssl::stream over it.
#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "arbor/asio/asio.hpp"
#include "asio_support.hpp"

#if defined(ARBOR_ASIO_TEST_SSL)
#include <boost/asio/ssl.hpp>

#include "tls/certificates.hpp"
#endif

namespace {

using namespace std::chrono_literals;
namespace net = boost::asio;
using arbor::asio::use_task;

class AsioStream : public arbor::test::AsioStreamFixture {};

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  return v;
}

struct Transfers {
  std::size_t some_written = 0, some_read = 0, exact_read = 0, all_written = 0;
  std::vector<std::byte> read_back, big_seen;
};

arbor::Task<arbor::Result<void>> peer_reads(arbor::TcpStream& peer, std::vector<std::byte>& out,
                                            std::size_t n) {
  out.resize(n);
  auto r = co_await peer.read_exact(out);
  co_return r;
}

arbor::Task<arbor::Result<Transfers>> transfer(arbor::Runtime& rt, arbor::asio::Stream& s,
                                               arbor::TcpStream& peer) {
  Transfers t;
  // async_write_some: what it reports is what the peer reads.
  const auto hello = pattern(5);
  auto w = co_await s.async_write_some(net::buffer(hello), use_task);
  if (!w) co_return w.error();
  t.some_written = *w;
  std::vector<std::byte> got(*w);
  auto g = co_await peer.read_exact(got);
  if (!g) co_return g.error();
  if (got != std::vector<std::byte>(hello.begin(), hello.begin() + static_cast<long>(*w)))
    co_return std::make_error_code(std::errc::illegal_byte_sequence);
  // async_read_some: at most the buffer, at least one byte.
  const auto ten = pattern(10);
  auto pw = co_await peer.write_all(ten);
  if (!pw) co_return pw.error();
  std::vector<std::byte> one(3);
  auto r = co_await s.async_read_some(net::buffer(one), use_task);
  if (!r) co_return r.error();
  t.some_read = *r;
  // net::async_read: exactly the rest.
  std::vector<std::byte> rest(10 - *r);
  auto e = co_await net::async_read(s, net::buffer(rest), use_task);
  if (!e) co_return e.error();
  t.exact_read = *e;
  t.read_back.assign(one.begin(), one.begin() + static_cast<long>(*r));
  t.read_back.insert(t.read_back.end(), rest.begin(), rest.end());
  // net::async_write of 4 MiB in three buffers (a gather write), read by the peer meanwhile.
  const auto big = pattern(4 << 20);
  auto reader = rt.spawn(peer_reads(peer, t.big_seen, big.size()));
  std::array<net::const_buffer, 3> parts{
      net::buffer(big.data(), 1), net::buffer(big.data() + 1, 1 << 20),
      net::buffer(big.data() + 1 + (1 << 20), big.size() - 1 - (1 << 20))};
  auto all = co_await net::async_write(s, parts, use_task);
  auto seen = co_await std::move(reader);
  if (!all) co_return all.error();
  if (!seen) co_return seen.error();
  t.all_written = *all;
  if (t.big_seen != big) co_return std::make_error_code(std::errc::illegal_byte_sequence);
  co_return t;
}

TEST_P(AsioStream, ReadsAndWritesMoveExactlyTheBytesTheyReport) {
  auto t = rt->block_on(transfer(*rt, *stream, peer));
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_GE(t->some_written, 1u);
  EXPECT_LE(t->some_written, 5u);
  EXPECT_GE(t->some_read, 1u);
  EXPECT_LE(t->some_read, 3u);
  EXPECT_EQ(t->some_read + t->exact_read, 10u);
  EXPECT_EQ(t->read_back, pattern(10));
  EXPECT_EQ(t->all_written, std::size_t{4 << 20});
}

arbor::Task<arbor::Result<std::size_t>> read_one(arbor::asio::Stream& s) {
  std::array<char, 16> buffer;
  auto r = co_await s.async_read_some(net::buffer(buffer), use_task);
  co_return r;
}

TEST_P(AsioStream, ThePeersEndIsEof) {
  peer.close();
  auto r = rt->block_on(read_one(*stream));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), arbor::asio::to_std(net::error::eof)) << r.error().message();
}

TEST_P(AsioStream, CloseWhileAReadIsPendingAbortsItOnAWorker) {
  std::promise<std::pair<boost::system::error_code, bool>> done;
  std::array<char, 16> buffer;
  std::promise<void> started;
  net::post(*ctx, [&] {
    stream->async_read_some(net::buffer(buffer), [&](boost::system::error_code ec, std::size_t) {
      done.set_value({ec, on_worker()});
    });
    started.set_value();
  });
  started.get_future().wait();
  net::post(*ctx, [&] { stream->close(); });
  auto [ec, worker] = done.get_future().get();
  EXPECT_EQ(ec, net::error::operation_aborted) << ec.message();
  EXPECT_TRUE(worker);
  EXPECT_FALSE(stream->is_open());
}

TEST_P(AsioStream, ASecondReadIsRefusedAndTheFirstGoesOn) {
  std::promise<std::pair<boost::system::error_code, std::size_t>> first, second;
  std::array<char, 16> a, b;
  std::promise<void> started;
  net::post(*ctx, [&] {
    stream->async_read_some(net::buffer(a), [&](boost::system::error_code ec, std::size_t n) {
      first.set_value({ec, n});
    });
    stream->async_read_some(net::buffer(b), [&](boost::system::error_code ec, std::size_t n) {
      second.set_value({ec, n});
    });
    started.set_value();
  });
  started.get_future().wait();
  auto refused = second.get_future().get();
  EXPECT_EQ(refused.first, boost::system::errc::device_or_resource_busy);
  EXPECT_EQ(refused.second, 0u);
  auto first_result = first.get_future();
  EXPECT_EQ(first_result.wait_for(0s), std::future_status::timeout);  // still pending
  const char text[] = "abc";
  ASSERT_TRUE(rt->block_on(peer.write_all(std::as_bytes(std::span(text, 3)))));
  auto [ec, n] = first_result.get();
  EXPECT_FALSE(ec) << ec.message();
  ASSERT_GE(n, 1u);
  EXPECT_EQ(std::memcmp(a.data(), text, n), 0);
}

TEST_P(AsioStream, HandlersAreNeverCalledInsideTheInitiatingCall) {
  // Data already there: an engine may finish the read inside async_read_some.
  const char text[] = "ready";
  ASSERT_TRUE(rt->block_on(peer.write_all(std::as_bytes(std::span(text, 5)))));
  std::promise<bool> inline_call;
  std::array<char, 16> buffer;
  net::post(*ctx, [&] {
    const auto me = std::this_thread::get_id();
    auto initiating = std::make_shared<std::atomic<bool>>(true);
    stream->async_read_some(
        net::buffer(buffer), [&, me, initiating](boost::system::error_code, std::size_t) {
          inline_call.set_value(initiating->load() && std::this_thread::get_id() == me);
        });
    initiating->store(false);
  });
  EXPECT_FALSE(inline_call.get_future().get());
}

arbor::Task<arbor::Result<void>> read_cancellable(arbor::asio::Stream& s,
                                                  arbor::Result<std::size_t>& inner) {
  std::array<char, 16> buffer;
  inner = co_await s.async_read_some(net::buffer(buffer), arbor::asio::cancel_with(s));
  if (!inner) co_return inner.error();
  co_return arbor::Result<void>{};
}

arbor::Task<arbor::Result<void>> read_with_timeout(arbor::asio::Stream& s,
                                                   arbor::Result<std::size_t>& inner) {
  auto r = co_await arbor::with_timeout(20ms, read_cancellable(s, inner));
  co_return r;
}

TEST_P(AsioStream, CancelWithEndsAPendingReadWhenTheTimeoutFires) {
  arbor::Result<std::size_t> inner = std::size_t{0};
  auto r = rt->block_on(read_with_timeout(*stream, inner));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::timed_out);
  ASSERT_FALSE(inner);
  EXPECT_EQ(inner.error(), std::errc::operation_canceled) << inner.error().message();
  EXPECT_TRUE(stream->is_open());  // cancelled, not closed: it still reads
  const char text[] = "after";
  ASSERT_TRUE(rt->block_on(peer.write_all(std::as_bytes(std::span(text, 5)))));
  auto again = rt->block_on(read_one(*stream));
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_GE(*again, 1u);
}

#if defined(ARBOR_ASIO_TEST_SSL)
using SslStream = net::ssl::stream<arbor::asio::Stream>;

arbor::Task<arbor::Result<void>> handshake(SslStream& s, net::ssl::stream_base::handshake_type t) {
  auto r = co_await s.async_handshake(t, use_task);
  co_return r;
}

arbor::Task<arbor::Result<std::string>> ssl_echo(arbor::Runtime& rt, SslStream& client,
                                                 SslStream& server) {
  auto accepting = rt.spawn(handshake(server, net::ssl::stream_base::server));
  auto connected = co_await handshake(client, net::ssl::stream_base::client);
  auto accepted = co_await std::move(accepting);
  if (!connected) co_return connected.error();
  if (!accepted) co_return accepted.error();
  const std::string hello = "hello over TLS over arbor";
  auto w = co_await net::async_write(client, net::buffer(hello), use_task);
  if (!w) co_return w.error();
  std::string got(hello.size(), '\0');
  auto r = co_await net::async_read(server, net::buffer(got), use_task);
  if (!r) co_return r.error();
  auto back = co_await net::async_write(server, net::buffer(got), use_task);
  if (!back) co_return back.error();
  std::string echoed(hello.size(), '\0');
  auto e = co_await net::async_read(client, net::buffer(echoed), use_task);
  if (!e) co_return e.error();
  co_return echoed;
}

TEST_P(AsioStream, SslStreamHandshakesAndEchoesOverIt) {
  const auto& certs = arbor::test::certificates();
  ASSERT_TRUE(certs.error.empty()) << certs.error;
  net::ssl::context server_tls(net::ssl::context::tls_server);
  server_tls.use_certificate_chain_file(certs.file("localhost.pem"));
  server_tls.use_private_key_file(certs.file("localhost.key"), net::ssl::context::pem);
  net::ssl::context client_tls(net::ssl::context::tls_client);
  client_tls.load_verify_file(certs.file("ca.pem"));
  client_tls.set_verify_mode(net::ssl::verify_peer);
  client_tls.set_verify_callback(net::ssl::host_name_verification("localhost"));
  auto pair = rt->block_on(arbor::test::connected_pair(*rt));
  ASSERT_TRUE(pair);
  {
    SslStream client(arbor::asio::Stream(*ctx, std::move(pair->client)), client_tls);
    SslStream server(arbor::asio::Stream(*ctx, std::move(pair->server)), server_tls);
    auto echoed = rt->block_on(ssl_echo(*rt, client, server));
    ASSERT_TRUE(echoed) << echoed.error().message();
    EXPECT_EQ(*echoed, "hello over TLS over arbor");
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(Engines, AsioStream, ::testing::ValuesIn(arbor::test::engine_variants()),
                         arbor::test::engine_name);

}  // namespace
