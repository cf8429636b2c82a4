// examples/proxy/tcp_proxy.cpp end to end: the real binary on an ephemeral 127.0.0.1 port in
// front of an upstream the test plays itself (a plain listening socket), stopped with SIGINT.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "example_process.hpp"

namespace {

using namespace arbor::example_test;
using Clock = std::chrono::steady_clock;

struct Proxy : ExampleProcess {
  explicit Proxy(int upstream_port, std::vector<std::string> flags = {})
      : ExampleProcess(args(upstream_port, std::move(flags))) {}
  static std::vector<std::string> args(int upstream_port, std::vector<std::string> flags) {
    auto argv = arbor::test::example_command(TCP_PROXY);
    argv.insert(argv.end(), {"127.0.0.1:0", "127.0.0.1:" + std::to_string(upstream_port)});
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }
};

std::string pattern(std::size_t size, char seed) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i)
    s[i] = static_cast<char>(seed + static_cast<char>(i % 251));
  return s;
}

TEST(ProxyExample, BytesFlowBothWaysAtOnce) {
  Listener upstream;
  Proxy proxy(upstream.port());
  ASSERT_NE(proxy.port(), 0);
  auto client = Socket::connect(proxy.port());
  ASSERT_TRUE(client.ok());
  auto server = upstream.accept();
  ASSERT_TRUE(server.ok());

  ASSERT_TRUE(client.send("ping"));
  EXPECT_EQ(server.read_exact(4), "ping");
  ASSERT_TRUE(server.send("pong"));
  EXPECT_EQ(client.read_exact(4), "pong");

  // 4 MiB each way, both written at once before anything is read: a proxy relaying one
  // direction at a time would deadlock once the buffers are full.
  const std::string up = pattern(4 << 20, 'a'), down = pattern(4 << 20, 'A');
  bool up_sent = false, down_sent = false;
  std::thread writer_up([&] { up_sent = client.send(up); });
  std::thread writer_down([&] { down_sent = server.send(down); });
  const auto got_up = server.read_exact(up.size());
  const auto got_down = client.read_exact(down.size());
  writer_up.join();
  writer_down.join();
  EXPECT_TRUE(up_sent && down_sent);
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);

  // A second connection at the same time gets an upstream connection of its own.
  auto other = Socket::connect(proxy.port());
  auto other_server = upstream.accept();
  ASSERT_TRUE(other.ok() && other_server.ok());
  ASSERT_TRUE(other.send("second"));
  EXPECT_EQ(other_server.read_exact(6), "second");

  EXPECT_EQ(proxy.stop(SIGINT), 0);  // with both connections open
}

TEST(ProxyExample, HalfClosePassesThrough) {
  Listener upstream;
  Proxy proxy(upstream.port());
  ASSERT_NE(proxy.port(), 0);
  auto client = Socket::connect(proxy.port());
  auto server = upstream.accept();
  ASSERT_TRUE(client.ok() && server.ok());

  ASSERT_TRUE(client.send("request"));
  ASSERT_TRUE(client.shutdown_write());
  std::string got;
  EXPECT_EQ(server.read_to_end(10s, &got), End::eof);  // the client's FIN reached upstream
  EXPECT_EQ(got, "request");
  // The other direction still flows, and then ends the same way.
  ASSERT_TRUE(server.send("reply after the client's end"));
  EXPECT_EQ(client.read_exact(28), "reply after the client's end");
  ASSERT_TRUE(server.shutdown_write());
  std::string rest = "unset";
  EXPECT_EQ(client.read_to_end(10s, &rest), End::eof);
  EXPECT_EQ(rest, "");

  EXPECT_EQ(proxy.stop(SIGINT), 0);
}

TEST(ProxyExample, TrafficKeepsAConnectionAliveAndIdlenessClosesIt) {
  Listener upstream;
  Proxy proxy(upstream.port(), {"--idle-timeout", "2"});
  ASSERT_NE(proxy.port(), 0);
  auto client = Socket::connect(proxy.port());
  auto server = upstream.accept();
  ASSERT_TRUE(client.ok() && server.ok());

  // Round trips for 3 s, longer than the timeout: traffic either way keeps it open.
  const auto busy_until = Clock::now() + 3s;
  int round_trips = 0;
  while (Clock::now() < busy_until) {
    ASSERT_TRUE(client.send("p"));
    ASSERT_EQ(server.read_exact(1), "p") << "after " << round_trips << " round trips";
    ASSERT_TRUE(server.send("q"));
    ASSERT_EQ(client.read_exact(1), "q");
    ++round_trips;
  }
  // Then silence: both sides are closed, about 2 s after the last byte.
  const auto quiet_since = Clock::now();
  EXPECT_EQ(client.read_to_end(10s), End::eof);
  EXPECT_EQ(server.read_to_end(10s), End::eof);
  EXPECT_GE(Clock::now() - quiet_since, 1s);  // not before the timeout (less a little latency)

  EXPECT_EQ(proxy.stop(SIGINT), 0);
}

TEST(ProxyExample, UpstreamDownResetsTheClient) {
  DeadPort nobody;  // bound, not listening: connecting is refused
  Proxy proxy(nobody.port());
  ASSERT_NE(proxy.port(), 0);
  auto client = Socket::connect(proxy.port());
  ASSERT_TRUE(client.ok());
  const auto start = Clock::now();
  EXPECT_EQ(client.read_to_end(10s), End::reset);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(proxy.stop(SIGINT), 0);
}

TEST(ProxyExample, AnUpstreamResetIsPassedOn) {
  Listener upstream;
  Proxy proxy(upstream.port());
  ASSERT_NE(proxy.port(), 0);
  auto client = Socket::connect(proxy.port());
  auto server = upstream.accept();
  ASSERT_TRUE(client.ok() && server.ok());
  ASSERT_TRUE(client.send("hi"));
  EXPECT_EQ(server.read_exact(2), "hi");
  const linger reset{1, 0};
  ::setsockopt(server.fd(), SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  server = Socket();  // closes with a reset
  EXPECT_EQ(client.read_to_end(10s), End::reset);
  EXPECT_EQ(proxy.stop(SIGINT), 0);
}

}  // namespace
