// http::Server used directly, in process: what a handler's mistakes turn into, and what bind()
// refuses. Clients are blocking sockets on 127.0.0.1; the server stops through shutdown().
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arbor/http/server.hpp"
#include "http_client.hpp"

namespace arbor::http {
namespace {

// Sends `request` and returns everything the server sends back until it closes.
std::string round_trip(int port, const std::string& request) {
  http_test::Client client(port);
  if (!client.connected() || !client.send(request)) return {};
  return client.read_all();
}

TEST(HttpServerApi, HandlerMistakesBecome500AndTheServerCarriesOn) {
  Runtime rt;
  const std::string huge_type(20'000, 't');
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  auto server = Server::bind(rt, options, [&](const Request& r, std::span<char>) -> Reply {
    if (r.target == "/throw") throw std::runtime_error("handler bug");
    if (r.target == "/huge") return {200, huge_type, "x", {}};
    return {200, "text/plain", "fine", {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  const int port = (*server)->local_address().port();
  auto running = rt.spawn((*server)->run());
  const std::string close = "Connection: close\r\n\r\n";
  EXPECT_EQ(round_trip(port, "GET /throw HTTP/1.1\r\nHost: h\r\n" + close).substr(0, 12),
            "HTTP/1.1 500");
  EXPECT_EQ(round_trip(port, "GET /huge HTTP/1.1\r\nHost: h\r\n" + close).substr(0, 12),
            "HTTP/1.1 500");
  const std::string ok = round_trip(port, "GET /ok HTTP/1.1\r\nHost: h\r\n" + close);
  EXPECT_EQ(ok.substr(0, 12), "HTTP/1.1 200");
  EXPECT_EQ(ok.substr(ok.size() - 4), "fine");
  (*server)->shutdown();
  running.join_blocking();
  EXPECT_EQ((*server)->counters().requests, 3u);
  EXPECT_EQ((*server)->counters().connections_active, 0u);
}

// Bodies larger than the output buffer, and replies that do not fit in what is left of it, in
// one pipelined batch: each must arrive whole, in order, and a HEAD must carry no body.
TEST(HttpServerApi, RepliesLargerThanTheOutputBufferArriveWholeAndInOrder) {
  Runtime rt;
  const std::string big(40'000, 'b'), mid(10'000, 'm');
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  auto server = Server::bind(rt, options, [&](const Request& r, std::span<char>) -> Reply {
    if (r.target == "/big") return {200, "text/plain", big, {}};
    if (r.target == "/mid") return {200, "text/plain", mid, {}};
    return {200, "text/plain", "small", {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  const int port = (*server)->local_address().port();
  auto running = rt.spawn((*server)->run());
  const struct {
    const char* method;
    const char* target;
    const std::string& body;  // what a GET gets
  } requests[] = {{"GET", "/mid", mid}, {"GET", "/mid", mid},       {"HEAD", "/big", big},
                  {"GET", "/big", big}, {"GET", "/small", "small"}, {"GET", "/mid", mid}};
  std::string pipeline;
  for (const auto& q : requests)
    pipeline += std::string(q.method) + " " + q.target + " HTTP/1.1\r\nHost: h\r\n\r\n";
  pipeline.insert(pipeline.size() - 2, "Connection: close\r\n");
  const std::string reply = round_trip(port, pipeline);
  std::size_t at = 0;
  for (const auto& q : requests) {
    const std::size_t head_end = reply.find("\r\n\r\n", at);
    ASSERT_NE(head_end, std::string::npos) << q.target;
    const std::string head = reply.substr(at, head_end + 4 - at);
    EXPECT_EQ(head.substr(0, 15), "HTTP/1.1 200 OK") << q.target;
    EXPECT_NE(head.find("\r\nContent-Length: " + std::to_string(q.body.size()) + "\r\n"),
              std::string::npos)
        << head;
    at = head_end + 4;
    if (std::string_view(q.method) == "HEAD") continue;
    EXPECT_EQ(reply.compare(at, q.body.size(), q.body), 0) << q.target;
    at += q.body.size();
  }
  EXPECT_EQ(at, reply.size());
  (*server)->shutdown();
  running.join_blocking();
  EXPECT_EQ((*server)->counters().requests, 6u);
}

// RFC 9112 §3.2.2: with an absolute-form target the handler sees the target's host (the Host
// field is ignored) and the path, as it would for origin-form.
TEST(HttpServerApi, Rfc9112_3_2_2_AbsoluteFormGivesTheHandlerTheTargetsHost) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  std::string seen;  // written by the handler, read after join_blocking()
  auto server = Server::bind(rt, options, [&](const Request& r, std::span<char>) -> Reply {
    seen = std::string(r.host) + " " + std::string(r.path) + " " + std::string(r.query);
    return {200, "text/plain", "ok", {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  const int port = (*server)->local_address().port();
  auto running = rt.spawn((*server)->run());
  const std::string reply =
      round_trip(port,
                 "GET http://target.example:81/p/q?x=1 HTTP/1.1\r\nHost: field.example\r\n"
                 "Connection: close\r\n\r\n");
  EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 200");
  (*server)->shutdown();
  running.join_blocking();
  EXPECT_EQ(seen, "target.example:81 /p/q x=1");
}

// Request::body, pipelined in one send: a small Content-Length body (in the input buffer), a
// large one (a body buffer; only one exists, so it must come back to be reused), a chunked one
// (a body buffer too), and none. The handler answers with the size and the last byte.
TEST(HttpServerApi, TheHandlerGetsTheWholeBody) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  options.limits.max_body = 100'000;
  options.body_buffers = 1;
  auto server = Server::bind(rt, options, [](const Request& r, std::span<char> scratch) -> Reply {
    const int n = std::snprintf(scratch.data(), scratch.size(), "[%zu:%c]", r.body.size(),
                                r.body.empty() ? '-' : r.body.back());
    return {200, "text/plain", {scratch.data(), static_cast<std::size_t>(n)}, {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  const int port = (*server)->local_address().port();
  auto running = rt.spawn((*server)->run());
  const std::string post = "POST / HTTP/1.1\r\nHost: h\r\n";
  const std::string reply =
      round_trip(port, post + "Content-Length: 3\r\n\r\nabc" + post +
                           "Content-Length: 50000\r\n\r\n" + std::string(49'999, 'x') + "y" + post +
                           "Transfer-Encoding: chunked\r\n\r\n4\r\nwxyz\r\n0\r\n\r\n" + post +
                           "Content-Length: 20000\r\n\r\n" + std::string(20'000, 'q') +
                           "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  std::string bodies;
  for (std::size_t at = 0; (at = reply.find('[', at)) != std::string::npos; ++at)
    bodies += reply.substr(at, reply.find(']', at) + 1 - at);
  EXPECT_EQ(bodies, "[3:c][50000:y][4:z][20000:q][0:-]") << reply;
  (*server)->shutdown();
  running.join_blocking();
  EXPECT_EQ((*server)->counters().requests, 5u);
}

// A client pipelines requests and never reads its replies, so its connection waits in a write
// when the server shuts down. run() must end it once the drain's time is up and complete only
// after its task has ended: it returned at the deadline with the connection still running, and
// the server destroyed under it crashed (ASan: heap-use-after-free in ~Connection, the
// server's block pool; SIGABRT or SIGSEGV at SIGTERM in the example server, 16 of 16 runs).
TEST(HttpServerApi, RunReturnsOnlyOnceEveryConnectionHasEnded) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  static const std::string reply(1000, 'r');  // a reply's body is a view: it must outlive it
  auto server = Server::bind(rt, options, [](const Request&, std::span<char>) -> Reply {
    return {200, "text/plain", reply, {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  auto running = rt.spawn((*server)->run(std::chrono::milliseconds(50)));
  http_test::Client hog((*server)->local_address().port(), nullptr,
                        http_test::Client::kSmallReceiveBuffer);
  ASSERT_TRUE(hog.connected());
  const std::size_t sent = hog.send_until_the_server_stops_reading(
      "GET / HTTP/1.1\r\nHost: h\r\n\r\n", std::size_t{64} << 20);
  ASSERT_LT(sent, std::size_t{64} << 20) << "the server never stopped reading";
  EXPECT_EQ((*server)->counters().connections_active, 1u);
  (*server)->shutdown();
  running.join_blocking();
  EXPECT_EQ((*server)->counters().connections_active, 0u)
      << "run() returned while a connection still used the server";
  server->reset();  // what a caller does next; ASan checks nothing is touched after this
}

// Issue 32: a pipelining client that reads its replies steadily was cut at the header timeout:
// the head deadline set before a read that began with part of a request stayed in force while
// that read's replies were written. Here every reply is 16 MiB, more than the kernel's buffers
// on both sides hold, so writing one lasts about as long as the client takes to read it (at
// least 0.6 s at 256 KiB per 10 ms), against a 100 ms header timeout.
TEST(HttpServerApi, Issue32_AClientReadingItsRepliesIsNotCutByTheHeaderTimeout) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  options.header_timeout = std::chrono::milliseconds(100);
  static const std::string reply(16 << 20, 'r');
  auto server = Server::bind(rt, options, [](const Request&, std::span<char>) -> Reply {
    return {200, "text/plain", reply, {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  auto running = rt.spawn((*server)->run());
  http_test::Client c((*server)->local_address().port());
  ASSERT_TRUE(c.connected());
  std::string got;
  const auto receive = [&](std::size_t most) {
    std::vector<char> chunk(most);
    for (;;) {
      const long n = ::recv(c.fd(), chunk.data(), most, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) got.append(chunk.data(), static_cast<std::size_t>(n));
      return n > 0;
    }
  };
  // Reads until `replies` whole replies are in `got`, 256 KiB at a time, 10 ms apart.
  const auto read_slowly_until = [&](std::size_t replies) {
    for (;;) {
      std::size_t whole = 0, at = 0;
      while ((at = got.find("\r\n\r\n", at)) != std::string::npos &&
             got.size() >= at + 4 + reply.size()) {
        ++whole;
        at += 4 + reply.size();
      }
      if (whole >= replies) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the slow reader under test
      if (!receive(256 * 1024)) return false;
    }
  };
  const std::string request = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
  // The first request and the start of the second; once the first reply begins (the server
  // has read them), the rest of the second. So the server reads the rest of a head it holds
  // part of, with the head deadline set, and then writes its 16 MiB reply.
  ASSERT_TRUE(c.send(request + request.substr(0, 10)));
  ASSERT_TRUE(receive(1));
  ASSERT_TRUE(c.send(request.substr(10)));
  ASSERT_TRUE(read_slowly_until(1)) << "the first reply was cut";
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(read_slowly_until(2)) << "the second reply was cut";
  EXPECT_GT(std::chrono::steady_clock::now() - started, options.header_timeout)
      << "the reply was read faster than the header timeout: the test proves nothing";
  EXPECT_EQ((*server)->counters().timeouts, 0u);
  (*server)->shutdown();
  running.join_blocking();
}

// RFC 9110 §10.1.1: a client that sends "Expect: 100-continue" waits for a 100 before its body
// (nothing was sent until the body came: a client without a fallback waited for the idle
// timeout). One 100 per request, for a body sent whole, in a buffer, or chunked; none to
// HTTP/1.0, and none when the body is already there.
TEST(HttpServerApi, Rfc9110_10_1_1_AnExpectedContinueIsSentBeforeTheBody) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  auto server = Server::bind(rt, options, [](const Request& r, std::span<char> scratch) -> Reply {
    // The body is a view: written into the connection's scratch, which outlives the reply.
    const std::string text = "got " + std::to_string(r.body.size());
    std::copy(text.begin(), text.end(), scratch.begin());
    return {200, "text/plain", std::string_view(scratch.data(), text.size()), {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  const int port = (*server)->local_address().port();
  auto running = rt.spawn((*server)->run());
  const std::string big(100'000, 'b');  // beyond the input buffer: a body buffer
  const struct {
    std::string head, body;
    const char* reply;
  } cases[] = {
      {"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", "hello",
       "got 5"},
      {"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 100000\r\n\r\n", big,
       "got 100000"},
      {"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
       "3\r\nabc\r\n0\r\n\r\n", "got 3"},
  };
  for (const auto& k : cases) {
    http_test::Client c(port);
    ASSERT_TRUE(c.send(k.head));
    const auto interim = c.read_response();
    EXPECT_EQ(interim.status, 100) << k.head;
    ASSERT_TRUE(c.send(k.body));
    const auto final_reply = c.read_response();
    EXPECT_EQ(final_reply.status, 200) << k.head;
    EXPECT_EQ(final_reply.body, k.reply) << k.head;
  }
  {  // the body with the head: no 100 (it would only be noise), the reply at once
    http_test::Client c(port);
    ASSERT_TRUE(
        c.send("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: "
               "2\r\nConnection: close\r\n\r\nhi"));
    const std::string all = c.read_all();
    EXPECT_EQ(all.substr(0, 12), "HTTP/1.1 200") << all;
    EXPECT_EQ(all.find("100 Continue"), std::string::npos) << all;
  }
  {  // HTTP/1.0: never a 1xx (RFC 9110 §15.2)
    http_test::Client c(port);
    ASSERT_TRUE(
        c.send("POST / HTTP/1.0\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"));
    ASSERT_TRUE(c.send("hi"));
    const std::string all = c.read_all();
    EXPECT_EQ(all.substr(0, 12), "HTTP/1.1 200") << all;
    EXPECT_EQ(all.find("100 Continue"), std::string::npos) << all;
  }
  (*server)->shutdown();
  running.join_blocking();
}

// A drain too long to add to the clock (milliseconds::max(), "no deadline") must still let
// the connections answer what they received. run() added it to steady_clock::now(): the sum
// overflowed to a deadline 1 ms in the past, so run() ended every connection at once as
// shutdown() began, and this client got one reply of four (the rest cut off). On the default
// engine (on io_uring the drain's read shutdown also ended the pending gather write, until the
// engine sent a send that ends with -EAGAIN back to its ring:
// CloseTest.AGatherWritePendingWhenTheReadSideIsShutDownGoesOn).
TEST(HttpServerApi, ADrainTooLongToAddToTheClockEndsNoConnectionEarly) {
  Runtime rt;
  const std::string body(std::size_t{8} << 20, 'b');  // more than the sockets' buffers hold
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  auto server = Server::bind(rt, options, [&](const Request&, std::span<char>) -> Reply {
    return {200, "text/plain", body, {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  auto running = rt.spawn((*server)->run(std::chrono::milliseconds::max()));
  http_test::Client client((*server)->local_address().port());
  ASSERT_TRUE(client.connected());
  constexpr int kRequests = 4;
  std::string pipeline;
  for (int i = 0; i < kRequests; ++i)
    pipeline += "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
  ASSERT_TRUE(client.send(pipeline));
  // The first reply, whole: the server has the requests and answers them; the next replies
  // wait in its writes until we read them, after shutdown().
  const auto first = client.read_response();
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(first.body.size(), body.size());
  (*server)->shutdown();
  int answered = 1;
  for (;;) {
    const auto r = client.read_response();
    if (r.status == 0) break;  // the server closed, after the last reply (or cut it short)
    EXPECT_EQ(r.body.size(), body.size());
    ++answered;
  }
  EXPECT_EQ(answered, kRequests) << "the drain ended the connection before it had answered";
  running.join_blocking();
  EXPECT_EQ((*server)->counters().connections_active, 0u);
}

// Timeouts too long to add to the clock (milliseconds::max(): no limit) overflowed as the drain
// once did: each deadline came out 1 ms in the past, and the sweeper cut an idle keep-alive
// connection at its first pass. Connection `b` is the clock: the header timeout cuts its
// partial head at a pass made after `a` went idle, which has looked at `a` too.
TEST(HttpServerApi, TimeoutsTooLongToAddToTheClockCutNothingEarly) {
  Runtime rt;
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  options.header_timeout = std::chrono::milliseconds(20);
  options.body_timeout = options.idle_timeout = options.write_timeout =
      std::chrono::milliseconds::max();
  auto server = Server::bind(rt, options, [](const Request&, std::span<char>) -> Reply {
    return {200, "text/plain", "ok", {}};
  });
  ASSERT_TRUE(server) << server.error().message();
  auto running = rt.spawn((*server)->run());
  const auto port = (*server)->local_address().port();
  const std::string request = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
  http_test::Client a(port);
  ASSERT_TRUE(a.connected());
  ASSERT_TRUE(a.send(request));
  ASSERT_EQ(a.read_response().status, 200);  // `a` is idle from here
  http_test::Client b(port);
  ASSERT_TRUE(b.connected());
  ASSERT_TRUE(b.send("GET / HTTP/1.1\r\n"));
  (void)b.read_response();  // returns once the header timeout has cut `b`
  EXPECT_EQ((*server)->counters().timeouts, 1u) << "an idle connection was cut too";
  ASSERT_TRUE(a.send(request));
  EXPECT_EQ(a.read_response().status, 200) << "the idle connection was cut";
  (*server)->shutdown();
  running.join_blocking();
}

TEST(HttpServerApi, BindRefusesBadOptions) {
  Runtime rt;
  auto handler = [](const Request&, std::span<char>) { return Reply{200, "text/plain", "", {}}; };
  ServerOptions options;
  options.listen = Address::loopback_v4(0);
  options.server_name = std::string(300, 's');
  EXPECT_EQ(Server::bind(rt, options, handler).error(), std::errc::invalid_argument);
  options.server_name = "arbor";
  options.max_connections = 0;
  EXPECT_EQ(Server::bind(rt, options, handler).error(), std::errc::invalid_argument);
  options.max_connections = 10;
  options.header_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(Server::bind(rt, options, handler).error(), std::errc::invalid_argument);
  options.header_timeout = std::chrono::milliseconds(1);
  options.body_timeout = std::chrono::milliseconds(-1);
  EXPECT_EQ(Server::bind(rt, options, handler).error(), std::errc::invalid_argument);
  options.body_timeout = std::chrono::milliseconds(1);
  options.write_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(Server::bind(rt, options, handler).error(), std::errc::invalid_argument);
  options.write_timeout = std::chrono::milliseconds(1);
  EXPECT_TRUE(Server::bind(rt, options, handler));  // the smallest of each is fine
}

}  // namespace
}  // namespace arbor::http
