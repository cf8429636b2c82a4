// examples/http_client/http_client.cpp end to end: the real binary fetching from arbor's own
// HTTP example server, and from servers the test plays itself on 127.0.0.1 (a thread with a
// plain listening socket that sends scripted responses), to reach the framings, the failures
// and the keep-alive decisions a real server would rarely show on demand.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "example_process.hpp"

namespace {

using namespace arbor::example_test;

struct Run {
  std::optional<int> status;  // nullopt: still running at the limit (then killed)
  std::string out;
  std::string err;
};

// Runs the client with `args`, collecting stdout and stderr, for at most `limit`.
Run run_client(const std::vector<std::string>& args, Millis limit = 30s) {
  auto argv = arbor::test::example_command(HTTP_CLIENT);
  argv.insert(argv.end(), args.begin(), args.end());
  int out[2], err[2];
  Run run;
  if (::pipe(out) != 0 || ::pipe(err) != 0) return run;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    for (int fd : {out[0], out[1], err[0], err[1]})
      ::close(fd);
    std::vector<char*> raw;
    for (auto& a : argv)
      raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* into[2] = {&run.out, &run.err};
  for (int open = 2; open > 0;) {
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(fds[i].fd, chunk, sizeof chunk);
      if (got > 0) {
        into[i]->append(chunk, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  // The pipes close as the process exits; its status follows a moment later.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
  const bool ended = pidfd >= 0 && wait_for(pidfd, POLLIN, std::max(left, Millis(100)));
  if (pidfd >= 0) ::close(pidfd);
  if (!ended) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (ended) run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

// Reads one request head (up to CRLF CRLF) and, if it has a Content-Length, its body.
std::optional<std::string> read_request(Socket& s) {
  std::string request;
  while (request.find("\r\n\r\n") == std::string::npos) {
    auto line = s.read_line();
    if (!line) return std::nullopt;
    request += *line + "\n";
  }
  const auto at = request.find("Content-Length: ");
  if (at != std::string::npos) {
    auto body = s.read_exact(std::stoul(request.substr(at + 16)));
    if (!body) return std::nullopt;
    request += *body;
  }
  return request;
}

// A server the test scripts: for each connection it accepts, it answers the requests on it with
// the next responses of `script` (one entry per request; an entry ending in "CLOSE" closes the
// connection after sending what precedes it; otherwise the connection stays open until the
// client closes it). The requests it saw are kept.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::vector<std::string>> per_connection)
      : thread_([this, script = std::move(per_connection)] {
          for (const auto& responses : script) {
            auto s = listener_.accept();
            if (!s.ok()) return;
            ++accepted_;
            bool closed = false;
            for (const auto& response : responses) {
              auto request = read_request(s);
              if (!request) break;
              requests_.push_back(*request);
              closed = response.ends_with("CLOSE");
              s.send(closed ? response.substr(0, response.size() - 5) : response);
              if (closed) break;
            }
            if (!closed) s.read_to_end(20s);
          }
        }) {}
  ~ScriptedServer() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::string url(const std::string& path = "/") const {
    return "http://127.0.0.1:" + std::to_string(listener_.port()) + path;
  }
  int accepted() const { return accepted_; }
  const std::vector<std::string>& requests() const { return requests_; }

 private:
  Listener listener_;  // before thread_: it exists when the thread starts
  int accepted_ = 0;
  std::vector<std::string> requests_;
  std::thread thread_;
};

constexpr const char* kOk = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

TEST(HttpClientExample, FetchesFromArborsOwnServer) {
  arbor::test::ChildProcess server([] {
    auto argv = arbor::test::example_command(HTTP_SERVER);
    argv.insert(argv.end(), {"--listen", "127.0.0.1:0", "--workers", "1"});
    return argv;
  }());
  ASSERT_NE(server.port(), 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  const auto run = run_client({base + "/plaintext", base + "/json"});
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "Hello, World!{\"message\":\"Hello, World!\"}");
  const auto missing = run_client({base + "/no-such-page"});
  EXPECT_EQ(missing.status, 4) << missing.err;  // a status of 400 or more
  EXPECT_EQ(server.stop(SIGINT), 0);
}

// "localhost" is resolved (to ::1 and 127.0.0.1 here, in the hosts file's order) and tried in
// turn: the scripted server listens on 127.0.0.1 only, so an attempt on ::1 is refused first.
TEST(HttpClientExample, ANameIsResolvedAndItsAddressesTried) {
  ScriptedServer server({{std::string(kOk) + "CLOSE"}});
  const std::string url = server.url("/named");
  const auto run = run_client({"http://localhost" + url.substr(url.rfind(':'))});
  server.join();
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "hello");
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_NE(server.requests()[0].find("Host: localhost:"), std::string::npos);
}

TEST(HttpClientExample, SendsAWellFormedRequestAndPrintsTheHeadWhenAsked) {
  ScriptedServer server(
      {{std::string("HTTP/1.1 200 OK\r\nX-Test: yes\r\nContent-Length: 2\r\n\r\nokCLOSE")}});
  const auto run = run_client({"--include", "--data", "a=1", server.url("/form?x=y")});
  server.join();
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "HTTP/1.1 200 OK\nX-Test: yes\nContent-Length: 2\n\nok");
  ASSERT_EQ(server.requests().size(), 1u);
  const std::string& request = server.requests()[0];
  EXPECT_EQ(request.substr(0, request.find('\n')), "POST /form?x=y HTTP/1.1\r");
  EXPECT_NE(request.find("Host: 127.0.0.1:"), std::string::npos) << request;
  EXPECT_NE(request.find("Content-Length: 3\r\n"), std::string::npos) << request;
  EXPECT_TRUE(request.ends_with("\r\n\r\na=1")) << request;
}

TEST(HttpClientExample, ReadsEveryBodyFraming) {
  ScriptedServer server({{
      // chunked, with an extension, a trailer and a chunk split across the reader's buffer
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value\r\nhello\r\n1\r\n \r\n" +
          std::string("4E20\r\n") + std::string(20'000, 'w') + "\r\n0\r\nTrailer: t\r\n\r\n",
      // an interim response first, then the final one
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
      // no body for 204 whatever it says
      "HTTP/1.1 204 No Content\r\n\r\n",
      // delimited by the end of the stream
      "HTTP/1.1 200 OK\r\n\r\nuntil the endCLOSE",
  }});
  const auto url = server.url();
  const auto run = run_client({url, url, url, url});
  server.join();
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "hello " + std::string(20'000, 'w') + "abcuntil the end");
  EXPECT_EQ(server.accepted(), 1);  // all four on one keep-alive connection
}

TEST(HttpClientExample, ReconnectsWhenTheServerClosesTheConnection) {
  ScriptedServer server({
      {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhelloCLOSE"},
      {"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nworldCLOSE"},  // 1.0: closes by default
      {kOk},
  });
  const auto url = server.url();
  const auto run = run_client({url, url, url});
  server.join();
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "helloworldhello");
  EXPECT_EQ(server.accepted(), 3);
}

TEST(HttpClientExample, AResponseWithBothContentLengthAndChunkedEndsItsConnection) {
  // The body is chunked (RFC 9112 §6.1), and the connection, which the server keeps open, is
  // not asked for a second response: the second URL gets a connection of its own.
  ScriptedServer server({
      {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
       "2\r\nok\r\n0\r\n\r\n"},
      {kOk},
  });
  const auto url = server.url();
  const auto run = run_client({url, url});
  server.join();
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "okhello");
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(HttpClientExample, AnHttp10ResponseWithTransferEncodingEndsItsConnection) {
  // RFC 9112 §6.1: an HTTP/1.0 message's framing is faulty if it has Transfer-Encoding (a 1.0
  // hop may have framed it otherwise), so its connection is closed after it even when the
  // server asks to keep it: the second URL gets a connection of its own.
  ScriptedServer server({
      {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
       "2\r\nok\r\n0\r\n\r\n"},
      {kOk},
  });
  const auto url = server.url();
  const auto run = run_client({"--timeout", "5", url, url});
  server.join();
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "okhello");
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(HttpClientExample, AMalformedResponseIsAClearError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"HTTP/2 200 OK\r\n\r\n", "malformed status line"},
      {"HTTP/1.1 2000 OK\r\n\r\n", "malformed status line"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", "malformed Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       "conflicting Content-Length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
       "does not end with CRLF"},
      {"HTTP/1.1 200 OK\r\nBad Field: x\r\n\r\n", "malformed header field"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshortCLOSE", "closed the connection"},
      {"HTTP/1.1 200 OK\r\nX: " + std::string(9000, 'x') + "\r\n\r\n", "too long"},
  };
  for (const auto& [response, reason] : cases) {
    ScriptedServer server({{response}});
    const auto run = run_client({server.url()});
    EXPECT_EQ(run.status, 1) << response.substr(0, 60);
    EXPECT_NE(run.err.find(reason), std::string::npos) << run.err;
  }
}

TEST(HttpClientExample, ASilentServerTimesOut) {
  Listener silent;  // accepts (the kernel does, into the backlog) and never answers
  const auto run =
      run_client({"--timeout", "1", "http://127.0.0.1:" + std::to_string(silent.port()) + "/"});
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("timed out"), std::string::npos) << run.err;
}

TEST(HttpClientExample, ARefusedConnectionIsAClearError) {
  DeadPort dead;
  const auto run = run_client({"http://127.0.0.1:" + std::to_string(dead.port()) + "/"});
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("cannot connect"), std::string::npos) << run.err;
}

TEST(HttpClientExample, BadArgumentsAreRefused) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{},
                                               {"https://127.0.0.1/"},
                                               {"http://"},
                                               {"http://host:0/"},
                                               {"http://host:65536/"},
                                               {"http://[::1/"},
                                               {"http://user@host/"},
                                               {"--timeout", "0"},
                                               {"--timeout"},
                                               {"--frobnicate", "http://127.0.0.1/"}}) {
    const auto run = run_client(args);
    EXPECT_EQ(run.status, 2) << (args.empty() ? "(none)" : args[0]);
    EXPECT_NE(run.err.find("usage"), std::string::npos);
  }
}

// A URL's bytes go into the request line and the Host field as they are: a space, a CR or LF,
// or another control byte in it would make a malformed request or let the URL add fields of
// its own (header injection). Such a URL is bad input, refused before anything is sent.
TEST(HttpClientExample, AUrlThatWouldChangeTheRequestsShapeIsRefused) {
  DeadPort dead;  // were one sent, the run would fail to connect (status 1), not refuse (2)
  const std::string base = "http://127.0.0.1:" + std::to_string(dead.port());
  for (const std::string& url : {base + "/a b", base + "/x\r\nX-Injected:1", base + "/x\nX:1",
                                 base + "/\x7f", base + "?a\tb", base + "\r\nX:1/"}) {
    const auto run = run_client({url});
    EXPECT_EQ(run.status, 2) << url;
    EXPECT_NE(run.err.find("usage"), std::string::npos) << run.err;
  }
}

}  // namespace
