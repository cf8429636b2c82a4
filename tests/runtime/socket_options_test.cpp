// The options every socket type shares (BasicSocket: buffer sizes, linger, native_handle) and
// TCP's own (no_delay, keep-alive timing), on TcpStream and TcpListener, on every engine
// variant: each is set through the typed method and read back (through the method or the
// native handle), and fails with bad_file_descriptor once the socket is closed.
#include <gtest/gtest.h>

#include <chrono>

#include "arbor/arbor.hpp"
#include "arbor/io/socket.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;

class SocketOptionsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt_ = test::make_runtime(GetParam());
    ASSERT_TRUE(rt_);
  }
  std::unique_ptr<Runtime> rt_;
};

// The options BasicSocket gives every type, on `socket`, which is open.
void check_common_options(BasicSocket& socket) {
  ASSERT_TRUE(socket.is_open());
  EXPECT_NE(socket.native_handle(), io::kInvalidHandle);
  ASSERT_TRUE(socket.set_receive_buffer_size(80 * 1024));
  EXPECT_GE(socket.receive_buffer_size().value(), 80 * 1024);
  ASSERT_TRUE(socket.set_send_buffer_size(40 * 1024));
  EXPECT_GE(socket.send_buffer_size().value(), 40 * 1024);
  EXPECT_FALSE(socket.linger().value().has_value());
  ASSERT_TRUE(socket.set_linger(3s));
  EXPECT_EQ(socket.linger().value(), std::optional<std::chrono::seconds>(3s));
  ASSERT_TRUE(socket.set_linger(std::nullopt));  // off again: the close below must not block
  EXPECT_FALSE(socket.linger().value().has_value());
}

void check_closed(BasicSocket& socket) {
  EXPECT_FALSE(socket.is_open());
  EXPECT_EQ(socket.native_handle(), io::kInvalidHandle);
  EXPECT_EQ(socket.set_receive_buffer_size(4096).error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(socket.send_buffer_size().error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(socket.set_linger(1s).error(), std::errc::bad_file_descriptor);
}

TEST_P(SocketOptionsTest, AStreamsOptionsReadBackAndFailOnceClosed) {
  auto pair = rt_->block_on(test::connected_pair(*rt_));
  ASSERT_TRUE(pair) << pair.error().message();
  TcpStream& s = pair->client;
  check_common_options(s);
  for (const bool on : {true, false}) {
    ASSERT_TRUE(s.set_no_delay(on));
    EXPECT_EQ(s.no_delay().value(), on);
  }
  const io::KeepAlive timing{20s, 3s, 5};
  if (auto k = s.set_keep_alive(timing); !k) {
    ASSERT_EQ(k.error(), std::errc::operation_not_supported) << k.error().message();
  } else {
    EXPECT_TRUE(s.keep_alive().value());
    const auto read = s.keep_alive_timing().value();
    EXPECT_EQ(read.idle, timing.idle);
    EXPECT_EQ(read.interval, timing.interval);
    EXPECT_EQ(read.count, timing.count);
  }
  ASSERT_TRUE(s.set_keep_alive(false));
  EXPECT_FALSE(s.keep_alive().value());
  s.close();
  check_closed(s);
  EXPECT_EQ(s.set_no_delay(true).error(), std::errc::bad_file_descriptor);
  EXPECT_EQ(s.set_keep_alive(timing).error(), std::errc::bad_file_descriptor);
}

TEST_P(SocketOptionsTest, AListenersOptionsReadBackAndFailOnceClosed) {
  auto listener = TcpListener::bind(*rt_, Address::loopback_v4(0));
  ASSERT_TRUE(listener);
  check_common_options(*listener);
  auto reuse_port = listener->reuse_port();
#if defined(_WIN32)
  EXPECT_EQ(reuse_port.error(), std::errc::no_protocol_option);
#else
  EXPECT_FALSE(reuse_port.value());
#endif
  listener->close();
  check_closed(*listener);
  EXPECT_EQ(listener->set_no_delay(true).error(), std::errc::bad_file_descriptor);
}

#if !defined(_WIN32)
// Linux copies a listener's socket options into each connection it accepts (Windows does too
// through SO_UPDATE_ACCEPT_CONTEXT, but wine does not copy TCP_NODELAY, so not asserted there).
TEST_P(SocketOptionsTest, AcceptedStreamsInheritTheListenersOptions) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
    if (!listener) co_return "bind";
    if (!listener->set_no_delay(true) || !listener->set_keep_alive(true)) co_return "set";
    auto accepted = rt.spawn(listener->accept());
    auto client = co_await TcpStream::connect(rt, *listener->local_address());
    auto server = co_await std::move(accepted);
    if (!client || !server) co_return "connect";
    if (!server->no_delay().value()) co_return "no_delay not inherited";
    if (!server->keep_alive().value()) co_return "keep_alive not inherited";
    co_return "ok";
  };
  EXPECT_EQ(rt_->block_on(body(*rt_)), "ok");
}

TEST_P(SocketOptionsTest, ReusePortListenersShareAnAddress) {
  ListenOptions options;
  options.reuse_port = true;
  auto first = TcpListener::bind(*rt_, Address::loopback_v4(0), options);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->reuse_port().value());
  auto second = TcpListener::bind(*rt_, *first->local_address(), options);
  EXPECT_TRUE(second) << second.error().message();
}
#endif

INSTANTIATE_TEST_SUITE_P(Engines, SocketOptionsTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
