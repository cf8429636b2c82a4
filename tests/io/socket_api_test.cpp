// The synchronous socket API (arbor/io/socket.hpp) on its own, no engine: the same expectations
// on every platform, so the Winsock version is held to the POSIX one, errors included (they
// compare equal to the same std::errc values).
#include <gtest/gtest.h>

#include <chrono>

#include "arbor/io/socket.hpp"

namespace arbor::io {
namespace {

// A TCP socket on 127.0.0.1 with a port the system chose, listening; closed on destruction.
struct Listener {
  Handle handle = kInvalidHandle;
  Address address;
  Listener() {
    auto h = open_socket(Address::loopback_v4(0), SocketType::tcp);
    EXPECT_TRUE(h) << h.error().message();
    if (!h) return;
    handle = *h;
    EXPECT_FALSE(bind(handle, Address::loopback_v4(0)));
    EXPECT_FALSE(listen(handle, 16));
    auto local = local_address(handle);
    EXPECT_TRUE(local) << local.error().message();
    if (local) address = *local;
  }
  ~Listener() { close_handle(handle); }
};

TEST(SocketApi, ListensOnALoopbackPortTheSystemChose) {
  Listener listener;
  ASSERT_NE(listener.handle, kInvalidHandle);
  EXPECT_NE(listener.address.port(), 0);
  EXPECT_EQ(listener.address, Address::loopback_v4(listener.address.port()));
}

TEST(SocketApi, BindingAPortInUseIsAddressInUse) {
  Listener listener;
  auto second = open_socket(listener.address, SocketType::tcp);
  ASSERT_TRUE(second);
  EXPECT_EQ(bind(*second, listener.address), std::errc::address_in_use);
  close_handle(*second);
}

TEST(SocketApi, AListenerHasNoPeer) {
  Listener listener;
  auto peer = peer_address(listener.handle);
  ASSERT_FALSE(peer);
  EXPECT_EQ(peer.error(), std::errc::not_connected);
}

TEST(SocketApi, OptionsReadBackWhatWasSet) {
  Listener listener;
  for (const auto option : {BoolOption::no_delay, BoolOption::keep_alive}) {
    for (const bool value : {true, false}) {
      EXPECT_FALSE(set_option(listener.handle, option, value));
      auto read = get_option(listener.handle, option);
      ASSERT_TRUE(read) << read.error().message();
      EXPECT_EQ(*read, value);
    }
  }
  EXPECT_FALSE(set_option(listener.handle, BoolOption::reuse_address, true));
  auto reuse = get_option(listener.handle, BoolOption::reuse_address);
  ASSERT_TRUE(reuse);
  EXPECT_TRUE(*reuse);
  EXPECT_FALSE(set_option(listener.handle, IntOption::receive_buffer, 64 * 1024));
  auto size = get_option(listener.handle, IntOption::receive_buffer);
  ASSERT_TRUE(size);
  EXPECT_GE(*size, 64 * 1024);  // Linux doubles it for bookkeeping; Windows keeps it
  EXPECT_FALSE(set_linger_reset(listener.handle));
}

TEST(SocketApi, UdpSocketsBindToo) {
  auto h = open_socket(Address::loopback_v4(0), SocketType::udp);
  ASSERT_TRUE(h);
  EXPECT_FALSE(bind(*h, Address::loopback_v4(0)));
  auto local = local_address(*h);
  ASSERT_TRUE(local);
  EXPECT_NE(local->port(), 0);
  close_handle(*h);
}

// A Unix name is no IP address: the multicast calls refuse it rather than read its bytes as
// one (they checked only for IPv6).
TEST(SocketApi, MulticastCallsRefuseAUnixName) {
  auto h = open_socket(Address::loopback_v4(0), SocketType::udp);
  ASSERT_TRUE(h);
  auto name = Address::unix_path("/tmp/arbor-not-an-ip");
  ASSERT_TRUE(name);
  auto group = Address::parse("239.1.2.3:0");
  ASSERT_TRUE(group);
  EXPECT_EQ(multicast_membership_v4(*h, *name, Address::loopback_v4(0), Membership::join),
            std::errc::invalid_argument);
  EXPECT_EQ(multicast_membership_v4(*h, *group, *name, Membership::join),
            std::errc::invalid_argument);
  EXPECT_EQ(multicast_membership_v6(*h, *name, 0, Membership::join), std::errc::invalid_argument);
  EXPECT_EQ(set_multicast_interface_v4(*h, *name), std::errc::invalid_argument);
  close_handle(*h);
}

TEST(SocketApi, ShuttingDownAnUnconnectedSocketIsNotConnected) {
  auto h = open_socket(Address::loopback_v4(0), SocketType::tcp);
  ASSERT_TRUE(h);
  EXPECT_EQ(shutdown(*h, ShutdownHow::both), std::errc::not_connected);
  close_handle(*h);
}

TEST(SocketApi, LingerReadsBackOffOrItsTimeout) {
  Listener listener;
  auto off = get_linger(listener.handle);
  ASSERT_TRUE(off) << off.error().message();
  EXPECT_FALSE(off->has_value());
  EXPECT_FALSE(set_linger(listener.handle, std::chrono::seconds(7)));
  auto on = get_linger(listener.handle);
  ASSERT_TRUE(on && on->has_value());
  EXPECT_EQ(**on, std::chrono::seconds(7));
  EXPECT_FALSE(set_linger(listener.handle, std::nullopt));
  EXPECT_FALSE(get_linger(listener.handle)->has_value());
  EXPECT_EQ(set_linger(listener.handle, std::chrono::seconds(-1)), std::errc::invalid_argument);
  EXPECT_EQ(set_linger(listener.handle, std::chrono::seconds(70000)), std::errc::invalid_argument);
}

TEST(SocketApi, KeepAliveTimingReadsBackAndTurnsKeepAliveOn) {
  Listener listener;
  const KeepAlive timing{std::chrono::seconds(30), std::chrono::seconds(5), 4};
  const auto e = set_keep_alive(listener.handle, timing);
  if (e == std::errc::operation_not_supported)
    GTEST_SKIP() << "this system cannot set keep-alive timing per socket (" << e.message() << ")";
  ASSERT_FALSE(e) << e.message();
  auto on = get_option(listener.handle, BoolOption::keep_alive);
  ASSERT_TRUE(on);
  EXPECT_TRUE(*on);
  auto read = get_keep_alive(listener.handle);
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->idle, timing.idle);
  EXPECT_EQ(read->interval, timing.interval);
  EXPECT_EQ(read->count, timing.count);
}

TEST(SocketApi, KeepAliveTimingOutOfRangeIsInvalidArgumentAndChangesNothing) {
  Listener listener;
  for (const KeepAlive bad : {KeepAlive{std::chrono::seconds(0), std::chrono::seconds(5), 4},
                              KeepAlive{std::chrono::seconds(30), std::chrono::seconds(-1), 4},
                              KeepAlive{std::chrono::seconds(30), std::chrono::seconds(5), 0},
                              KeepAlive{std::chrono::hours(24), std::chrono::seconds(5), 4}})
    EXPECT_EQ(set_keep_alive(listener.handle, bad), std::errc::invalid_argument);
  auto on = get_option(listener.handle, BoolOption::keep_alive);
  ASSERT_TRUE(on);
  EXPECT_FALSE(*on);
}

TEST(SocketApi, UdpOptionsAndADefaultPeer) {
  auto a = open_socket(Address::loopback_v4(0), SocketType::udp);
  auto b = open_socket(Address::loopback_v4(0), SocketType::udp);
  ASSERT_TRUE(a && b);
  ASSERT_FALSE(bind(*a, Address::loopback_v4(0)));
  ASSERT_FALSE(bind(*b, Address::loopback_v4(0)));
  for (const bool value : {true, false}) {
    EXPECT_FALSE(set_option(*a, BoolOption::broadcast, value));
    EXPECT_EQ(get_option(*a, BoolOption::broadcast).value(), value);
    EXPECT_FALSE(set_option(*a, BoolOption::multicast_loop_v4, value));
    EXPECT_EQ(get_option(*a, BoolOption::multicast_loop_v4).value(), value);
  }
  EXPECT_EQ(peer_address(*a).error(), std::errc::not_connected);
  const Address to = local_address(*b).value();
  EXPECT_FALSE(connect_now(*a, to));
  EXPECT_EQ(peer_address(*a).value(), to);
  EXPECT_FALSE(set_multicast_interface_v4(*a, Address::loopback_v4(0)));
  EXPECT_EQ(set_multicast_interface_v4(*a, Address::loopback_v6(0)), std::errc::invalid_argument);
  close_handle(*a);
  close_handle(*b);
}

TEST(SocketApi, ClosingTheInvalidHandleIsANoOp) {
  close_handle(kInvalidHandle);
  ignore_sigpipe();
  ignore_sigpipe();  // idempotent
}

}  // namespace
}  // namespace arbor::io
