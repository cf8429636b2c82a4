// Beast over arbor::asio::Stream: an HTTP client inside an arbor Task, WebSocket echo (a
// 1 MiB message too) on every engine variant with every handler on arbor's workers, and
// examples/websocket end to end. The only file of asio_tests that includes Beast (slow to
// compile), so that CI compiles it once per build.
#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <filesystem>
#include <string>
#include <thread>

#include "arbor/asio/asio.hpp"
#include "runtime/runtime_support.hpp"
// child_process.hpp has an under_wine() of its own (for the example binaries), which would
// clash with runtime_support.hpp's in this file; renamed here, unused.
#define under_wine example_under_wine
#include "child_process.hpp"
#undef under_wine

namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using arbor::asio::use_task;

// Threads of this process now (Linux: one entry per thread in /proc/self/task).
std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

class BeastOverArbor : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt = arbor::test::make_runtime(GetParam());
    ASSERT_NE(rt, nullptr);
    ctx.emplace(*rt);
  }
  void TearDown() override {
    if (ctx) ctx->wait_idle();
    ctx.reset();
  }
  std::unique_ptr<arbor::Runtime> rt;
  std::optional<arbor::asio::Context> ctx;
};

bool on_worker(arbor::Runtime& rt) {
  return arbor::sched::Scheduler::current() == &rt.scheduler();
}

// --- HTTP: Beast's client in a Task against a small arbor server on loopback ---

// Reads one request head and answers it with a body naming its target. Plain arbor.
arbor::Task<arbor::Result<std::string>> answer_one(arbor::TcpStream stream) {
  std::string head;
  std::array<std::byte, 1024> buffer;
  while (head.find("\r\n\r\n") == std::string::npos) {
    auto n = co_await stream.read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return std::make_error_code(std::errc::connection_aborted);
    head.append(reinterpret_cast<const char*>(buffer.data()), *n);
  }
  const std::string target = head.substr(4, head.find(' ', 4) - 4);
  const std::string body = "you asked for " + target;
  const std::string response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body;
  auto w = co_await stream.write_all(std::as_bytes(std::span(response)));
  if (!w) co_return w.error();
  co_return head;
}

struct HttpOutcome {
  std::string request_head;
  unsigned status = 0;
  std::string body;
  bool resumed_on_workers = false;
};

arbor::Task<arbor::Result<HttpOutcome>> http_round_trip(arbor::Runtime& rt,
                                                        arbor::asio::Context& ctx) {
  auto listener = arbor::TcpListener::bind(rt, arbor::Address::loopback_v4(0));
  if (!listener) co_return listener.error();
  auto tcp = co_await arbor::TcpStream::connect(rt, *listener->local_address());
  if (!tcp) co_return tcp.error();
  auto accepted = co_await listener->accept();
  if (!accepted) co_return accepted.error();
  auto server = rt.spawn(answer_one(std::move(*accepted)));

  arbor::asio::Stream stream(ctx, std::move(*tcp));
  http::request<http::empty_body> request{http::verb::get, "/beast/on/arbor", 11};
  request.set(http::field::host, "localhost");
  request.set(http::field::user_agent, "arbor-asio-test");
  HttpOutcome out;
  auto sent = co_await http::async_write(stream, request, use_task);
  if (!sent) co_return sent.error();
  bool workers = on_worker(rt);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> response;
  auto got = co_await http::async_read(stream, buffer, response, use_task);
  if (!got) co_return got.error();
  workers = workers && on_worker(rt);
  auto head = co_await std::move(server);
  if (!head) co_return head.error();
  out.request_head = *head;
  out.status = response.result_int();
  out.body = response.body();
  out.resumed_on_workers = workers;
  co_return out;
}

TEST_P(BeastOverArbor, HttpClientInATaskRoundTripsAndStartsNoThread) {
  const std::size_t threads = thread_count();
  auto r = rt->block_on(http_round_trip(*rt, *ctx));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->request_head.rfind("GET /beast/on/arbor HTTP/1.1\r\n", 0), 0u) << r->request_head;
  EXPECT_NE(r->request_head.find("User-Agent: arbor-asio-test\r\n"), std::string::npos);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "you asked for /beast/on/arbor");
  EXPECT_TRUE(r->resumed_on_workers);
  EXPECT_EQ(thread_count(), threads);  // Beast HTTP holds no timer: no Asio thread
}

// --- WebSocket: a Beast server and a Beast client, both over arbor::asio::Stream ---

arbor::Task<arbor::Result<int>> ws_echo_server(arbor::asio::Context& ctx, arbor::TcpStream tcp) {
  websocket::stream<arbor::asio::Stream> ws(arbor::asio::Stream(ctx, std::move(tcp)));
  ws.read_message_max(8 << 20);
  auto accepted = co_await ws.async_accept(use_task);
  if (!accepted) co_return accepted.error();
  boost::beast::flat_buffer buffer;
  int echoed = 0;
  for (;;) {
    auto n = co_await ws.async_read(buffer, use_task);
    if (!n) {
      if (n.error() == arbor::asio::to_std(websocket::error::closed)) co_return echoed;
      co_return n.error();
    }
    ws.binary(!ws.got_text());
    auto w = co_await ws.async_write(buffer.data(), use_task);
    if (!w) co_return w.error();
    buffer.consume(buffer.size());
    ++echoed;
  }
}

struct WsOutcome {
  std::string text;
  bool big_equal = false;
  bool text_was_text = false;
  bool handlers_on_workers = false;
  int echoed = 0;
};

// A read whose handler is a plain callback (wrapping the task's): records where Beast calls it.
arbor::Task<arbor::Result<bool>> read_checking_thread(arbor::Runtime& rt,
                                                      websocket::stream<arbor::asio::Stream>& ws,
                                                      boost::beast::flat_buffer& buffer) {
  std::atomic<int> state{0};  // 1: on a worker, 2: elsewhere
  auto r = co_await net::async_initiate<const arbor::asio::use_task_t,
                                        void(boost::system::error_code, std::size_t)>(
      [&](auto handler) {
        ws.async_read(buffer, [&, h = std::move(handler)](boost::system::error_code ec,
                                                          std::size_t n) mutable {
          state = on_worker(rt) ? 1 : 2;
          std::move(h)(ec, n);
        });
      },
      use_task);
  if (!r) co_return r.error();
  co_return state.load() == 1;
}

arbor::Task<arbor::Result<WsOutcome>> ws_round_trip(arbor::Runtime& rt, arbor::asio::Context& ctx) {
  auto listener = arbor::TcpListener::bind(rt, arbor::Address::loopback_v4(0));
  if (!listener) co_return listener.error();
  auto tcp = co_await arbor::TcpStream::connect(rt, *listener->local_address());
  if (!tcp) co_return tcp.error();
  auto accepted = co_await listener->accept();
  if (!accepted) co_return accepted.error();
  auto server = rt.spawn(ws_echo_server(ctx, std::move(*accepted)));

  websocket::stream<arbor::asio::Stream> ws(arbor::asio::Stream(ctx, std::move(*tcp)));
  ws.read_message_max(8 << 20);
  auto shook = co_await ws.async_handshake("localhost", "/", use_task);
  if (!shook) co_return shook.error();
  WsOutcome out;
  bool workers = on_worker(rt);
  ws.text(true);
  auto w = co_await ws.async_write(net::buffer(std::string("hello, websocket")), use_task);
  if (!w) co_return w.error();
  boost::beast::flat_buffer buffer;
  auto handler_on_worker = co_await read_checking_thread(rt, ws, buffer);
  if (!handler_on_worker) co_return handler_on_worker.error();
  workers = workers && *handler_on_worker && on_worker(rt);
  out.text = boost::beast::buffers_to_string(buffer.data());
  out.text_was_text = ws.got_text();
  buffer.consume(buffer.size());
  // 1 MiB binary: many frames' worth of reads and writes on both sides.
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>((i * 31 + 11) & 0xff);
  ws.binary(true);
  auto wb = co_await ws.async_write(net::buffer(big), use_task);
  if (!wb) co_return wb.error();
  auto rb = co_await ws.async_read(buffer, use_task);
  if (!rb) co_return rb.error();
  workers = workers && on_worker(rt);
  out.big_equal = boost::beast::buffers_to_string(buffer.data()) == big;
  auto closed = co_await ws.async_close(websocket::close_code::normal, use_task);
  if (!closed) co_return closed.error();
  auto echoed = co_await std::move(server);
  if (!echoed) co_return echoed.error();
  out.echoed = *echoed;
  out.handlers_on_workers = workers;
  co_return out;
}

TEST_P(BeastOverArbor, WebSocketEchoesTextAndAMebibyteWithHandlersOnWorkers) {
  const std::size_t threads = thread_count();
  auto r = rt->block_on(ws_round_trip(*rt, *ctx));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->text, "hello, websocket");
  EXPECT_TRUE(r->text_was_text);
  EXPECT_TRUE(r->big_equal);
  EXPECT_EQ(r->echoed, 2);
  EXPECT_TRUE(r->handlers_on_workers);
  // websocket::stream holds a steady_timer: Boost 1.74 runs it on one scheduler thread of its
  // own for a context that is not an io_context. Exactly one, and only a timer waits on it.
  EXPECT_EQ(thread_count(), threads + 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, BeastOverArbor,
                         ::testing::ValuesIn(arbor::test::engine_variants()),
                         arbor::test::engine_name);

// --- examples/websocket end to end: the real binary, a Beast client on its own io_context ---

struct WebsocketServer : arbor::test::ChildProcess {
  WebsocketServer() : ChildProcess({WEBSOCKET_SERVER, "127.0.0.1:0"}) {}
};

TEST(WebsocketExample, EchoesTextAndBinaryToSeveralClientsAndStopsOnSigint) {
  WebsocketServer server;
  ASSERT_NE(server.port(), 0);
  net::io_context io;
  const net::ip::tcp::endpoint at(net::ip::address_v4::loopback(),
                                  static_cast<unsigned short>(server.port()));
  websocket::stream<net::ip::tcp::socket> a(io), b(io);
  a.next_layer().connect(at);
  b.next_layer().connect(at);
  a.handshake("127.0.0.1", "/");
  b.handshake("127.0.0.1", "/");
  a.read_message_max(8 << 20);
  boost::beast::flat_buffer buffer;
  a.text(true);
  a.write(net::buffer(std::string("first")));
  b.text(true);
  b.write(net::buffer(std::string("second")));
  b.read(buffer);
  EXPECT_EQ(boost::beast::buffers_to_string(buffer.data()), "second");
  EXPECT_TRUE(b.got_text());
  buffer.consume(buffer.size());
  a.read(buffer);
  EXPECT_EQ(boost::beast::buffers_to_string(buffer.data()), "first");
  buffer.consume(buffer.size());
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>(i & 0xff);
  a.binary(true);
  a.write(net::buffer(big));
  a.read(buffer);
  EXPECT_FALSE(a.got_text());
  EXPECT_TRUE(boost::beast::buffers_to_string(buffer.data()) == big);
  a.close(websocket::close_code::normal);
  // b is still connected: SIGINT ends its connection too, and the server exits cleanly.
  EXPECT_EQ(server.stop(SIGINT), 0);
  boost::system::error_code ec;
  buffer.consume(buffer.size());
  b.read(buffer, ec);
  EXPECT_TRUE(ec) << "the stopped server's connection is over";
}

}  // namespace
