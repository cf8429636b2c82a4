// The HTTP example server, end to end: the real binary on an ephemeral 127.0.0.1 port, driven
// by curl, a raw-socket client and wrk. Every server is started and stopped by its test.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "../child_process.hpp"
#include "../sched/test_support.hpp"
#include "arbor/io/engine.hpp"
#include "http_client.hpp"

namespace {

using namespace std::chrono_literals;
using arbor::http_test::Client;
using arbor::http_test::Response;

// ---- the server process --------------------------------------------------------------------

// The signal that stops the server gracefully: SIGTERM, or under wine SIGINT (Ctrl-C;
// child_process.hpp).
int graceful_stop() {
  return arbor::test::under_wine() ? SIGINT : SIGTERM;
}

// The server's command line for a shell.
std::string shell_command() {
  std::string command;
  for (const auto& word : arbor::test::example_command(HTTP_SERVER))
    command += (command.empty() ? "" : " ") + word;
  return command;
}

// The example server on 127.0.0.1:0 with two workers and `flags` (child_process.hpp).
class ServerProcess : public arbor::test::ChildProcess {
 public:
  explicit ServerProcess(std::vector<std::string> flags)
      : ChildProcess(with_defaults(std::move(flags))) {}
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port()) + path;
  }

 private:
  static std::vector<std::string> with_defaults(std::vector<std::string> flags) {
    std::vector<std::string> argv = arbor::test::example_command(HTTP_SERVER);
    argv.insert(argv.end(), {"--listen", "127.0.0.1:0", "--workers", "2"});
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }
};

// ---- a raw-socket client: http_client.hpp ----

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

// Sends `request` on a fresh connection: it must be answered with `status` and "Connection:
// close", and the server must then close the connection.
void expect_answered_then_closed(int port, const std::string& request, int status) {
  Client c(port);
  ASSERT_TRUE(c.send(request));
  const Response r = c.read_response();
  EXPECT_EQ(r.status, status);
  EXPECT_EQ(r.field("Connection"), "close");
  EXPECT_TRUE(c.closed_by_server());
}

const std::regex kDate("Date: [A-Z][a-z]{2}, \\d{2} [A-Z][a-z]{2} \\d{4} \\d{2}:\\d{2}:\\d{2} GMT");

// Replaces the Date value (after checking its form) so a whole response compares exactly.
std::string without_date(const std::string& response) {
  return std::regex_replace(response, kDate, "Date: DATE");
}

// ---- tests ---------------------------------------------------------------------------------

class HttpServer : public ::testing::TestWithParam<std::string> {
 protected:
  // The parameter is an engine name, with "-pollers" for dedicated poller threads or "-rings"
  // for a ring per worker.
  void start(std::vector<std::string> flags = {}) {
    std::string engine = GetParam();
    std::string mode = "workers";
    for (std::string_view suffix : {"pollers", "rings"}) {
      const std::string dashed = "-" + std::string(suffix);
      if (!engine.ends_with(dashed)) continue;
      engine.resize(engine.size() - dashed.size());
      mode = suffix;
    }
    flags.insert(flags.end(), {"--engine", engine, "--io-mode", mode});
    server_ = std::make_unique<ServerProcess>(std::move(flags));
    ASSERT_GT(server_->port(), 0) << "the server did not start";
  }
  // Every test ends with a graceful stop that must exit 0: a crash, a sanitizer report
  // (halt_on_error) or a leak found at exit fails the test that caused it.
  void TearDown() override {
    if (!server_ || server_->exited()) return;
    const auto status = server_->stop(graceful_stop(), 30s);
    ASSERT_TRUE(status.has_value()) << "the server did not exit within 30 s of its stop signal";
    EXPECT_EQ(*status, 0) << "the server's exit status";
  }
  ServerProcess& server() { return *server_; }
  std::unique_ptr<ServerProcess> server_;
};

TEST_P(HttpServer, CurlGetsExactPlaintextAndJson) {
  start();
  const std::string plain =
      arbor::test::output_of("curl -s -i --max-time 10 " + server().url("/plaintext"));
  EXPECT_TRUE(std::regex_search(plain, kDate)) << plain;
  EXPECT_EQ(without_date(plain),
            "HTTP/1.1 200 OK\r\nServer: arbor\r\nDate: DATE\r\nContent-Type: text/plain\r\n"
            "Content-Length: 13\r\n\r\nHello, World!");
  const std::string json =
      arbor::test::output_of("curl -s -i --max-time 10 " + server().url("/json"));
  EXPECT_EQ(without_date(json),
            "HTTP/1.1 200 OK\r\nServer: arbor\r\nDate: DATE\r\nContent-Type: application/json\r\n"
            "Content-Length: 27\r\n\r\n{\"message\":\"Hello, World!\"}");
}

TEST_P(HttpServer, CurlSeesNotFoundAndMethodNotAllowed) {
  start();
  EXPECT_EQ(
      without_date(arbor::test::output_of("curl -s -i --max-time 10 " + server().url("/nope"))),
      "HTTP/1.1 404 Not Found\r\nServer: arbor\r\nDate: DATE\r\nContent-Type: text/plain\r\n"
      "Content-Length: 9\r\n\r\nNot Found");
  EXPECT_EQ(without_date(arbor::test::output_of("curl -s -i --max-time 10 -X DELETE " +
                                                server().url("/json"))),
            "HTTP/1.1 405 Method Not Allowed\r\nServer: arbor\r\nDate: DATE\r\n"
            "Content-Type: text/plain\r\nContent-Length: 18\r\nAllow: GET, HEAD\r\n\r\n"
            "Method Not Allowed");
  // HEAD: the GET's headers, no body.
  EXPECT_EQ(without_date(
                arbor::test::output_of("curl -s -I --max-time 10 " + server().url("/plaintext"))),
            "HTTP/1.1 200 OK\r\nServer: arbor\r\nDate: DATE\r\nContent-Type: text/plain\r\n"
            "Content-Length: 13\r\n\r\n");
}

TEST_P(HttpServer, MetricsArePrometheusText) {
  start();
  const std::string m = arbor::test::output_of("curl -s --max-time 10 " + server().url("/metrics"));
  for (const char* name :
       {"arbor_scheduler_queued ", "arbor_scheduler_parks_total ", "arbor_scheduler_wakes_total ",
        "arbor_scheduler_steals_total ", "arbor_scheduler_driver_waits_total ",
        "arbor_event_pool_idle ", "arbor_engine_events_total ", "arbor_http_connections ",
        "arbor_http_requests_total ", "arbor_http_parse_errors_total "})
    EXPECT_NE(m.find(std::string("\n") + name), std::string::npos) << name;
  EXPECT_NE(m.find("# TYPE arbor_http_requests_total counter\n"), std::string::npos);
}

TEST_P(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  start();
  Client c(server().port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(get("/plaintext") + get("/json") + get("/nope") + get("/plaintext")));
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  EXPECT_EQ(c.read_response().body, "{\"message\":\"Hello, World!\"}");
  EXPECT_EQ(c.read_response().status, 404);
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  // Still open: keep-alive is the default.
  ASSERT_TRUE(c.send(get("/plaintext")));
  EXPECT_EQ(c.read_response().status, 200);
}

// A pipelined request whose request line came in one read, behind a complete request, and
// the rest of its head in the next: the read moves its bytes to the front of the buffer, and
// the request must be routed by those bytes, not by what the next read put where they were.
// The client reads the first reply before sending the rest, so the split is a read boundary.
TEST_P(HttpServer, APipelinedHeadSplitAcrossReadsKeepsItsTarget) {
  start();
  const std::string plaintext = get("/plaintext");
  const std::string split_at = "GET /plaintext HTTP/1.1\r\nHo";
  const std::string echo_1 =
      "POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
  for (const std::string& first : {get("/json"), echo_1}) {
    Client c(server().port());
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.send(first + split_at));
    const Response r = c.read_response();  // the first request's: its read is over
    ASSERT_EQ(r.status, 200);
    // What follows overwrites where the split head was before the read moved it.
    ASSERT_TRUE(c.send(plaintext.substr(split_at.size()) + get("/json") + get("/json")));
    const Response split = c.read_response();
    EXPECT_EQ(split.status, 200) << first;
    EXPECT_EQ(split.body, "Hello, World!") << first;
    EXPECT_EQ(c.read_response().body, "{\"message\":\"Hello, World!\"}");
    EXPECT_EQ(c.read_response().body, "{\"message\":\"Hello, World!\"}");
  }
}

TEST_P(HttpServer, ARequestSentByteByByteIsAnswered) {
  start();
  Client c(server().port());
  ASSERT_TRUE(c.connected());
  for (char ch : get("/json"))
    ASSERT_TRUE(c.send(std::string(1, ch)));
  const Response r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "{\"message\":\"Hello, World!\"}");
}

TEST_P(HttpServer, ConnectionCloseAndHttp10AreHonoured) {
  start();
  expect_answered_then_closed(server().port(), get("/plaintext", "Connection: close\r\n"), 200);
  expect_answered_then_closed(server().port(), "GET /plaintext HTTP/1.0\r\n\r\n", 200);
  {
    Client c(server().port());
    ASSERT_TRUE(c.send("GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    const Response r = c.read_response();
    EXPECT_EQ(r.field("Connection"), "keep-alive");
    ASSERT_TRUE(c.send("GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    EXPECT_EQ(c.read_response().status, 200);
  }
}

TEST_P(HttpServer, ABodyWithinTheLimitIsSkipped) {
  start();
  Client c(server().port());
  ASSERT_TRUE(c.send("POST /plaintext HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello" +
                     get("/plaintext")));
  const Response first = c.read_response();
  EXPECT_EQ(first.status, 405);
  EXPECT_EQ(first.field("Allow"), "GET, HEAD");
  EXPECT_EQ(c.read_response().body, "Hello, World!");
}

// Issue 14: a reply that closes the connection must not be lost to the request body the
// server has not read. The head and a 1 MiB body go out in one send(); only then does the
// client read. Closing with that body unread makes the kernel answer it with a reset, which
// fails the send and destroys the reply in the client's receive buffer. The server must read
// (and drop) the body, half-close, and let the client see the whole reply, then EOF.
void expect_reply_survives_unread_body(int port, const std::string& head, std::size_t body_size,
                                       int status) {
  Client c(port);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(head + std::string(body_size, 'x'))) << "reset while sending: " << head;
  const Response r = c.read_response();
  ASSERT_EQ(r.status, status) << head;
  EXPECT_EQ(r.field("Connection"), "close");
  EXPECT_EQ(r.body.size(), std::stoul(r.field("Content-Length")));
  char byte;
  ssize_t n;
  do {
    n = ::recv(c.fd(), &byte, 1, 0);
  } while (n < 0 && errno == EINTR);
  EXPECT_EQ(n, 0) << "expected EOF, got " << (n < 0 ? std::strerror(errno) : "more bytes");
}

TEST_P(HttpServer, Issue14_AClosingReplyIsNotLostToAnUnreadBody) {
  start();
  constexpr std::size_t kBody = 1 << 20;  // the default --max-body
  const std::string length = "Content-Length: " + std::to_string(kBody) + "\r\n\r\n";
  struct Case {
    std::string head;
    int status;
  };
  const Case cases[] = {
      {"POST /plaintext HTTP/1.1\r\nHost: h\r\nConnection: close\r\n" + length, 405},
      {"POST /plaintext HTTP/1.0\r\n" + length, 405},
      {"POST /nowhere HTTP/1.1\r\nHost: h\r\nConnection: close\r\n" + length, 404},
      // An error reply: the body is over --max-body, so it is never read as a body.
      {"POST /plaintext HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(kBody + 1) +
           "\r\n\r\n",
       413},
  };
  for (const Case& k : cases) {
    const std::size_t body = k.status == 413 ? kBody + 1 : kBody;
    for (int run = 0; run < 25; ++run) {
      expect_reply_survives_unread_body(server().port(), k.head, body, k.status);
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) {
        ADD_FAILURE() << "failed on run " << run;
        return;
      }
    }
  }
}

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: test\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A body of `n` bytes in a pattern that does not repeat with a short period, so a lost or
// moved byte shows.
std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>('a' + (i % 251 + i / 251) % 26);
  return s;
}

TEST_P(HttpServer, PostEchoGetsTheWholeBodyAndPipelinedRequestsFollowIt) {
  start();
  Client c(server().port());
  // Small bodies, in the input buffer, pipelined with what follows them; an empty one.
  ASSERT_TRUE(c.send(post("/echo", "hello") + post("/echo", "") + get("/plaintext")));
  Response r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.field("Content-Type"), "application/octet-stream");
  EXPECT_EQ(r.body, "hello");
  r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  // A body split from its head and in two (the server cannot answer before the last part).
  const std::string split = post("/echo", pattern(5000));
  ASSERT_TRUE(c.send(split.substr(0, 30)));
  ASSERT_TRUE(c.send(split.substr(30, 2000)));
  ASSERT_TRUE(c.send(split.substr(2030)));
  EXPECT_EQ(c.read_response().body, pattern(5000));
  // Bodies too large for the input buffer (a shared body buffer), at and below --max-body,
  // with a request right behind them in the same send.
  for (std::size_t n : {std::size_t{1} << 20, std::size_t{300'000}, std::size_t{16'385}}) {
    ASSERT_TRUE(c.send(post("/echo", pattern(n)) + get("/json")));
    r = c.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), n);
    EXPECT_TRUE(r.body == pattern(n)) << n;
    EXPECT_EQ(c.read_response().status, 200) << "the request after the " << n << "-byte body";
  }
  // Only POST.
  ASSERT_TRUE(c.send(get("/echo")));
  r = c.read_response();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.field("Allow"), "POST");
}

// `body` in chunks of at most `size` bytes, then the last chunk and a trailer.
std::string chunked(const std::string& body, std::size_t size) {
  std::string out;
  char line[32];
  for (std::size_t at = 0; at < body.size(); at += size) {
    const std::size_t n = std::min(size, body.size() - at);
    std::snprintf(line, sizeof line, "%zx;ext=1\r\n", n);
    out += line + body.substr(at, n) + "\r\n";
  }
  return out + "0\r\nTrailer: t\r\n\r\n";
}

TEST_P(HttpServer, ChunkedBodiesAreDecodedForTheHandler) {
  start();
  const std::string head = "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  Client c(server().port());
  // Behind another request in the same send (the head is not at the buffer's start), with a
  // request right behind it.
  ASSERT_TRUE(c.send(get("/plaintext") + head + chunked("hello world", 5) + get("/json")));
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  Response r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello world");
  EXPECT_EQ(c.read_response().status, 200);
  // Large, in many chunks and reads, split from its head.
  const std::string body = pattern(300'000);
  const std::string all = head + chunked(body, 4000) + get("/plaintext");
  ASSERT_TRUE(c.send(all.substr(0, 20)));
  ASSERT_TRUE(c.send(all.substr(20)));
  r = c.read_response();
  EXPECT_EQ(r.body.size(), body.size());
  EXPECT_TRUE(r.body == body);
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  // Over --max-body in all: 413, and the reply arrives.
  expect_reply_survives_unread_body(server().port(), head + chunked(pattern((1 << 20) + 1), 65536),
                                    0, 413);
}

TEST_P(HttpServer, ABodyNoBodyBufferCanTakeGets503AndTheReplyArrives) {
  start({"--body-buffers", "0"});
  // Within the input buffer: still served.
  {
    Client c(server().port());
    ASSERT_TRUE(c.send(post("/echo", pattern(1000))));
    EXPECT_EQ(c.read_response().body, pattern(1000));
  }
  // Beyond it: 503, the connection closes, and the unread body costs no reset.
  expect_reply_survives_unread_body(
      server().port(), "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n", 100'000,
      503);
  // And it says when to try again (RFC 9110 §10.2.3).
  Client c(server().port());
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n"));
  const Response r = c.read_response();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.field("Retry-After"), "1");
}

// Issue 32: 70 connections from one host trickling their bodies held every shared body buffer,
// and every other body got a 503 for as long as the trickle lasted. Now one peer (an IP
// address) holds at most --body-buffers-per-peer of them. A 100 Continue is the sign that a
// connection holds a buffer (the server sends it once it has taken one).
TEST_P(HttpServer, Issue32_OnePeersSlowUploadsCannotTakeEveryBodyBuffer) {
  start({"--body-buffers", "4", "--body-buffers-per-peer", "2"});
  const std::string head = "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n";
  const auto holds_a_buffer = [&](Client& c) {
    return c.connected() && c.send(head + "Expect: 100-continue\r\n\r\n") &&
           c.read_response().status == 100;
  };
  Client a(server().port()), b(server().port());  // 127.0.0.1's share, bodies still to come
  ASSERT_TRUE(holds_a_buffer(a));
  ASSERT_TRUE(holds_a_buffer(b));
  {
    Client c(server().port());  // a third from it: 503, though two buffers are free
    ASSERT_TRUE(c.send(head + "\r\n"));
    EXPECT_EQ(c.read_response().status, 503);
  }
  Client d(server().port(), "127.0.0.2");  // another peer is served
  ASSERT_TRUE(d.connected());
  ASSERT_TRUE(d.send(head + "\r\n" + pattern(100'000)));
  const Response r = d.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, pattern(100'000));
  // a's body ends: its buffer goes back to the pool and off 127.0.0.1's share. It goes back
  // once the reply, written straight from it, is out: a moment after a reads that reply, so a
  // new connection may still be refused (503) until then; one is given a buffer soon after.
  ASSERT_TRUE(a.send(pattern(100'000)));
  EXPECT_EQ(a.read_response().status, 200);
  EXPECT_TRUE(arbor::sched::test::eventually(
      [&] {
        Client e(server().port());
        return holds_a_buffer(e);
      },
      std::chrono::seconds(10)));
}

TEST_P(HttpServer, MalformedAndOversizedRequestsGetTheirStatusAndAClose) {
  start({"--max-body", "1000"});
  const std::string big_line = "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string big_head =
      "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(20000, 'v') + "\r\n\r\n";
  const struct {
    std::string request;
    int status;
  } cases[] = {
      {"NOT HTTP\r\n\r\n", 400},
      {"GET / HTTP/1.1\nHost: h\n\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},  // no Host
      {"GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", 400},
      {big_line, 414},
      {big_head, 431},
      {"POST /json HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n", 413},
      {"POST /json HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST /json HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\n", 400},
      {"POST /json HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", 413},
      {"GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505},
  };
  for (const auto& k : cases) {
    Client c(server().port());
    ASSERT_TRUE(c.send(k.request + get("/plaintext")));
    const Response r = c.read_response();
    EXPECT_EQ(r.status, k.status) << k.request.substr(0, 40);
    EXPECT_EQ(r.field("Connection"), "close");
    EXPECT_TRUE(c.closed_by_server()) << "the request after an error is not answered";
  }
  // The server is unharmed.
  Client c(server().port());
  ASSERT_TRUE(c.send(get("/plaintext")));
  EXPECT_EQ(c.read_response().status, 200);
}

// RFC 9112 §3.2.2: "A server MUST accept the absolute-form in requests." The path is routed as
// an origin-form one would be (the host taken from the target: request_parser_test).
TEST_P(HttpServer, Rfc9112_3_2_2_AbsoluteFormTargetsAreRouted) {
  start();
  Client c(server().port());
  ASSERT_TRUE(c.send("GET http://localhost/plaintext HTTP/1.1\r\nHost: elsewhere\r\n\r\n"));
  const Response r = c.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "Hello, World!");
  ASSERT_TRUE(c.send("GET HTTP://localhost:1/json?x=1 HTTP/1.1\r\nHost: h\r\n\r\n"));
  EXPECT_EQ(c.read_response().body, "{\"message\":\"Hello, World!\"}");
  // curl sends absolute-form when it talks to a proxy: this server as its own proxy.
  const std::string proxied = arbor::test::output_of(
      "curl -s --max-time 10 -x 127.0.0.1:" + std::to_string(server().port()) +
      " http://example/plaintext");
  EXPECT_EQ(proxied, "Hello, World!");
}

// RFC 9112 §2.2: a server "SHOULD ignore at least one empty line (CRLF) received prior to the
// request-line". Some are ignored, before the first request and between pipelined ones; an
// endless stream of them is a 400, not a connection kept busy for free.
TEST_P(HttpServer, Rfc9112_2_2_LeadingEmptyLinesAreIgnored) {
  start();
  Client c(server().port());
  ASSERT_TRUE(
      c.send("\r\n" + get("/plaintext") + "\n" + get("/json") + "\r\n\r\n" + get("/plaintext")));
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  EXPECT_EQ(c.read_response().body, "{\"message\":\"Hello, World!\"}");
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  std::string crlfs;
  for (int i = 0; i < 100; ++i)
    crlfs += "\r\n";
  expect_answered_then_closed(server().port(), crlfs, 400);  // a flood of them is not
}

// --max-headers (default 100): curl with 64 -H flags (67 fields with its own) is answered; more
// fields than the limit are a 431.
TEST_P(HttpServer, MaxHeadersFlagBoundsTheFieldCount) {
  start();
  std::string flags;
  for (int i = 0; i < 64; ++i)
    flags += " -H 'X-Field-" + std::to_string(i) + ": v'";
  EXPECT_EQ(
      arbor::test::output_of("curl -s --max-time 10" + flags + " " + server().url("/plaintext")),
      "Hello, World!");
  auto fields = [](int n) {
    std::string extra;
    for (int i = 1; i < n; ++i)  // and Host
      extra += "X-" + std::to_string(i) + ": v\r\n";
    return get("/plaintext", extra);
  };
  // `limit` fields are answered, one more is a 431 that closes the connection.
  auto bounded_at = [&](int limit) {
    Client c(server().port());
    ASSERT_TRUE(c.send(fields(limit)));
    EXPECT_EQ(c.read_response().status, 200);
    ASSERT_TRUE(c.send(fields(limit + 1)));
    EXPECT_EQ(c.read_response().status, 431);
    EXPECT_TRUE(c.closed_by_server());
  };
  bounded_at(100);
  EXPECT_EQ(server().stop(graceful_stop(), 30s), std::optional<int>(0));
  start({"--max-headers", "10"});
  bounded_at(10);
}

// RFC 9112 §3 / RFC 9110 §5.6.2: a request line is refused at its first byte that cannot belong
// to a method (tchar) or a target, with no line end, no 8 KB and no header timeout (60 s here)
// needed. The client's 10 s read timeout is only the failure bound.
TEST_P(HttpServer, Rfc9112_3_GarbageRequestLineIsRefusedWithoutALineEnd) {
  start({"--header-timeout-ms", "60000"});
  for (const std::string& garbage : {std::string("\x16\x03\x01\x00\xa5\x01\x00", 7),  // TLS
                                     std::string("GET /\x01"), std::string("G{ET")})
    expect_answered_then_closed(server().port(), garbage, 400);
}

TEST_P(HttpServer, ASlowClientIsCutOffByTheHeaderTimeout) {
  start({"--header-timeout-ms", "300"});
  Client c(server().port());
  const std::string request = get("/plaintext", "X-Padding: " + std::string(40, 'p') + "\r\n");
  std::size_t sent = 0;
  bool cut = false;
  while (sent < request.size() && !cut) {
    // One byte every 50 ms: the slow client under test, not synchronisation.
    if (!c.send(request.substr(sent++, 1))) break;
    pollfd p{c.fd(), POLLIN | POLLRDHUP, 0};
    cut = ::poll(&p, 1, 50) == 1 && c.closed_by_server();
  }
  EXPECT_TRUE(cut || c.closed_by_server());
  EXPECT_LT(sent, request.size()) << "the whole request went through at 20 bytes/s";
}

TEST_P(HttpServer, AnIdleConnectionIsClosedAfterTheIdleTimeout) {
  start({"--idle-timeout-ms", "200"});
  Client c(server().port());
  ASSERT_TRUE(c.send(get("/plaintext")));
  EXPECT_EQ(c.read_response().status, 200);
  EXPECT_TRUE(c.closed_by_server());  // blocks until the server closes (10 s safety bound)
}

// A metric's value from /metrics, asked on `c` (kept alive: the caller's connection).
std::optional<long long> metric(Client& c, const std::string& name) {
  if (!c.send(get("/metrics"))) return std::nullopt;
  const Response r = c.read_response();
  const auto at = r.body.find("\n" + name + " ");
  if (r.status != 200 || at == std::string::npos) return std::nullopt;
  return std::stoll(r.body.substr(at + name.size() + 2));
}

// Polls /metrics on `c` until `name` equals `want` (the server's view catching up with what
// the client already saw), for at most 10 s; the last value seen.
std::optional<long long> await_metric(Client& c, const std::string& name, long long want) {
  std::optional<long long> v;
  const auto until = std::chrono::steady_clock::now() + 10s;
  do
    v = metric(c, name);
  while (v && *v != want && std::chrono::steady_clock::now() < until);
  return v;
}

// Issue 32: a client that stops reading its replies held its connection (and its buffers) until
// the idle timeout, 60 s by default, counted from the read before. Now a write that makes no
// progress for --write-timeout-ms ends the connection. The metric is the server's own account;
// with the fix gone it stays 0 past await_metric's 10 s.
TEST_P(HttpServer, Issue32_AClientThatStopsReadingIsCutByTheWriteTimeout) {
  // The other timeouts are far beyond await_metric's 10 s: only the write timeout can cut.
  start({"--write-timeout-ms", "300", "--header-timeout-ms", "60000"});
  Client hog(server().port(), nullptr, Client::kSmallReceiveBuffer);
  ASSERT_TRUE(hog.connected());
  const std::size_t sent =
      hog.send_until_the_server_stops_reading(get("/plaintext"), std::size_t{64} << 20);
  ASSERT_LT(sent, std::size_t{64} << 20) << "the server never stopped reading";
  Client m(server().port());
  EXPECT_EQ(await_metric(m, "arbor_http_timeouts_total", 1), 1);
  EXPECT_EQ(await_metric(m, "arbor_http_connections", 1), 1);  // m alone
}

// Issue 32: a body trickled within the gap between reads (idle timeout, 60 s here) held a body
// buffer for as long as the trickle lasted; --body-timeout-ms now bounds the whole body.
TEST_P(HttpServer, Issue32_ATrickledBodyIsCutByTheBodyTimeout) {
  start({"--body-timeout-ms", "300"});
  Client c(server().port());
  const std::size_t length = 100'000;  // past the input buffer: a shared body buffer
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(length) +
                     "\r\n\r\n"));
  std::size_t sent = 0;
  bool cut = false;
  while (sent < length && !cut) {
    // 100 bytes every 20 ms (5 KB/s: 20 s for the body): the slow client under test.
    if (!c.send(std::string(100, 'b'))) break;
    sent += 100;
    pollfd p{c.fd(), POLLIN | POLLRDHUP, 0};
    cut = ::poll(&p, 1, 20) == 1 && c.closed_by_server();
  }
  EXPECT_TRUE(cut || c.closed_by_server());
  EXPECT_LT(sent, length) << "the whole body went through at 5 KB/s";
}

// Each client has a request in progress: a whole one (answered) and the start of the next, in
// one send; the server is waiting for the rest.
void make_busy(Client& c) {
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(get("/plaintext") + "GET /plain"));
  ASSERT_EQ(c.read_response().status, 200);
}

// At the limit with every connection mid-request, a new one is closed at once (none is idle to
// make room), and the server recovers once a slot frees.
TEST_P(HttpServer, ConnectionsBeyondTheLimitAreClosedWhenNoneIsIdle) {
  start({"--max-connections", "3"});
  auto a = std::make_unique<Client>(server().port());
  Client b(server().port()), m(server().port());
  make_busy(*a);
  make_busy(b);
  // m sees the others busy (idle 0 while m's own request is answered), then becomes busy too.
  EXPECT_EQ(await_metric(m, "arbor_http_connections_idle", 0), 0);
  make_busy(m);
  {
    Client over(server().port());
    (void)over.send(get("/plaintext"));
    EXPECT_EQ(over.read_response().status, 0);
    EXPECT_TRUE(over.closed_by_server());
  }
  a.reset();  // frees a slot; the server notices asynchronously, so retry for a while
  bool served = false;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!served && std::chrono::steady_clock::now() < until) {
    Client again(server().port());
    served = again.send(get("/plaintext")) && again.read_response().status == 200;
  }
  EXPECT_TRUE(served);
  // b, still mid-request throughout (so never evictable), was unharmed and completes.
  EXPECT_TRUE(b.send("text HTTP/1.1\r\nHost: h\r\n\r\n"));
  EXPECT_EQ(b.read_response().body, "Hello, World!");
  EXPECT_EQ(metric(b, "arbor_http_connections_evicted_total"), 0);
  EXPECT_GE(metric(b, "arbor_http_connections_rejected_total").value_or(0), 1);
}

// At the limit, the connection idle longest (waiting for its next request) is closed to admit a
// new one, like nginx's reuse of keep-alive connections. The idle gauge, read on the newest
// connection after each exchange, makes the order in which the others went idle certain.
TEST_P(HttpServer, AtTheLimitTheLongestIdleConnectionMakesRoom) {
  start({"--max-connections", "8"});
  Client m(server().port());  // asks /metrics; itself busy while its request is answered
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 7; ++i) {
    idle.push_back(std::make_unique<Client>(server().port()));
    ASSERT_TRUE(idle.back()->send(get("/plaintext")));
    ASSERT_EQ(idle.back()->read_response().status, 200);
    ASSERT_EQ(await_metric(m, "arbor_http_connections_idle", i + 1), i + 1);
  }
  // 8 open, all idle: a new client is served, and idle[0], the oldest, is closed for it.
  Client fresh(server().port());
  ASSERT_TRUE(fresh.send(get("/plaintext")));
  EXPECT_EQ(fresh.read_response().body, "Hello, World!");
  EXPECT_TRUE(idle[0]->closed_by_server());
  EXPECT_EQ(metric(fresh, "arbor_http_connections_evicted_total"), 1);
  // The rest were left alone: each still answers (and none of them needed a new admission).
  for (std::size_t i = 1; i < idle.size(); ++i) {
    ASSERT_TRUE(idle[i]->send(get("/plaintext")));
    EXPECT_EQ(idle[i]->read_response().status, 200) << i;
  }
  EXPECT_EQ(metric(m, "arbor_http_connections_evicted_total"), 1);
  EXPECT_EQ(metric(m, "arbor_http_connections_rejected_total"), 0);
}

// Under wine SIGINT (Ctrl-C) instead: Windows has no SIGTERM, but the drain is the same.
TEST_P(HttpServer, SigtermAnswersRequestsInFlightThenExitsZero) {
  start();
  Client busy(server().port());
  Client idle(server().port());
  for (Client* c : {&busy, &idle}) {  // both accepted before the signal
    ASSERT_TRUE(c->send(get("/plaintext")));
    ASSERT_EQ(c->read_response().status, 200);
  }
  ASSERT_TRUE(busy.send(get("/plaintext") + get("/json") + get("/plaintext")));
  const auto exit = server().stop(graceful_stop(), 10s);
  EXPECT_EQ(busy.read_response().body, "Hello, World!");
  EXPECT_EQ(busy.read_response().body, "{\"message\":\"Hello, World!\"}");
  EXPECT_EQ(busy.read_response().body, "Hello, World!");
  EXPECT_TRUE(busy.closed_by_server());
  EXPECT_TRUE(idle.closed_by_server());
  ASSERT_TRUE(exit.has_value()) << "no exit within 10 s";
  EXPECT_EQ(*exit, 0);
}

// A client pipelines requests and never reads the replies: at the stop signal its connection
// waits in a write. Once --shutdown-timeout-ms passes the server ends it and exits 0 (it
// aborted: the server was destroyed while that connection still ran, 16 of 16 runs).
TEST_P(HttpServer, AStopWhileAClientReadsNothingEndsItAndExitsZero) {
  start({"--shutdown-timeout-ms", "200"});
  Client hog(server().port(), nullptr, Client::kSmallReceiveBuffer);
  ASSERT_TRUE(hog.connected());
  const std::size_t sent =
      hog.send_until_the_server_stops_reading(get("/plaintext"), std::size_t{64} << 20);
  ASSERT_LT(sent, std::size_t{64} << 20) << "the server never stopped reading";
  const auto exit = server().stop(graceful_stop(), 10s);
  ASSERT_TRUE(exit.has_value()) << "no exit within 10 s";
  EXPECT_EQ(*exit, 0);
}

// SIGHUP and SIGUSR1 (a terminal hang-up, a log rotator) and SIGPIPE must not stop the server.
// Were one not handled, its default action would kill the process as kill() is called (the
// kernel ends a process at once for an unblocked fatal signal), so the request after them would
// fail and the exit status below would name the signal.
TEST_P(HttpServer, HupUsr1AndPipeLeaveTheServerServing) {
  if (arbor::test::under_wine())
    GTEST_SKIP() << "Windows has none of these signals: wine ends the program";
  start();
  for (int signal : {SIGHUP, SIGUSR1, SIGPIPE, SIGHUP})
    ASSERT_EQ(::kill(server().pid(), signal), 0);
  Client c(server().port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(get("/plaintext")));
  EXPECT_EQ(c.read_response().body, "Hello, World!");
  const auto exit = server().stop(SIGTERM, 30s);
  ASSERT_TRUE(exit.has_value()) << "no exit within 30 s of SIGTERM";
  EXPECT_EQ(*exit, 0);
}

// SIGINT (Ctrl-C) and SIGQUIT drain as SIGTERM does: what was sent is answered, then exit 0
// (SIGQUIT's default action would dump core instead).
TEST_P(HttpServer, SigintAndSigquitAnswerRequestsInFlightThenExitZero) {
  for (int signal : {SIGINT, SIGQUIT}) {
    if (signal == SIGQUIT && arbor::test::under_wine())
      break;  // Windows has no SIGQUIT; SIGINT is Ctrl-C
    start();
    Client c(server().port());
    ASSERT_TRUE(c.send(get("/plaintext")));
    ASSERT_EQ(c.read_response().status, 200);  // accepted before the signal
    ASSERT_TRUE(c.send(get("/json")));
    const auto exit = server().stop(signal, 30s);
    EXPECT_EQ(c.read_response().body, "{\"message\":\"Hello, World!\"}") << signal;
    EXPECT_TRUE(c.closed_by_server()) << signal;
    ASSERT_TRUE(exit.has_value()) << "no exit within 30 s of signal " << signal;
    EXPECT_EQ(*exit, 0) << signal;
  }
}

// Under wine, with 16 connections, a request now and then waits over wrk's default 2 s timeout
// (wine passes every socket call through the wineserver; docs/platforms.md): 10 s there.
TEST_P(HttpServer, WrkSmokeRunHasNoErrors) {
  start();
  const std::string wrk =
      arbor::test::under_wine() ? "wrk --timeout 10s -t1 -c16 -d2s " : "wrk -t1 -c16 -d2s ";
  const std::string out = arbor::test::output_of(wrk + "-s " PERF_HTTP_DIR "/pipeline.lua " +
                                                 server().url("/plaintext") + " -- 4 2>&1");
  EXPECT_NE(out.find("requests in"), std::string::npos) << out;
  EXPECT_EQ(out.find("Socket errors"), std::string::npos) << out;
  EXPECT_EQ(out.find("Non-2xx"), std::string::npos) << out;
  const std::string json = arbor::test::output_of(wrk + server().url("/json") + " 2>&1");
  EXPECT_NE(json.find("requests in"), std::string::npos) << json;
  EXPECT_EQ(json.find("Socket errors"), std::string::npos) << json;
  EXPECT_EQ(json.find("Non-2xx"), std::string::npos) << json;
}

std::vector<std::string> server_variants() {
  // Under wine the server is the Windows build: its engine, not this process's.
  auto names =
      arbor::test::under_wine() ? std::vector<std::string>{"iocp"} : arbor::io::Engine::available();
  for (std::size_t i = 0, n = names.size(); i < n; ++i) {
    names.push_back(names[i] + "-pollers");
    if (names[i] == "uring") names.push_back("uring-rings");
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Engines, HttpServer, ::testing::ValuesIn(server_variants()),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(HttpServerFlags, BadFlagsExitTwoWithAMessage) {
  for (const char* flags :
       {"--workers zero", "--listen nowhere", "--engine fast", "--bogus 1", "--max-connections",
        "--header-timeout-ms -5", "--io-mode threads", "--max-headers 0", "--max-headers -1",
        "--max-headers 1001", "--max-headers many", "--max-body 1073741825", "--max-body -1",
        "--body-buffers -1", "--body-buffers 1048577", "--body-buffers x",
        "--body-buffers-per-peer -1", "--body-timeout-ms 0", "--write-timeout-ms x"}) {
    const std::string out =
        arbor::test::output_of(shell_command() + " " + flags + " 2>&1; echo \"exit=$?\"");
    EXPECT_NE(out.find("http_server: "), std::string::npos) << flags << ": " << out;
    EXPECT_NE(out.find("exit=2"), std::string::npos) << flags << ": " << out;
  }
  const std::string help = arbor::test::output_of(shell_command() + " --help; echo \"exit=$?\"");
  EXPECT_NE(help.find("--listen HOST:PORT"), std::string::npos);
  EXPECT_NE(help.find("--max-headers N"), std::string::npos);
  EXPECT_NE(help.find("exit=0"), std::string::npos);
}

}  // namespace
