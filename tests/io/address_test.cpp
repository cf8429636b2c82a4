#include "arbor/address.hpp"

#include <gtest/gtest.h>

namespace arbor {
namespace {

TEST(Address, ParsesAndFormatsIpv4) {
  auto a = Address::parse("127.0.0.1:8080");
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->is_v6());
  EXPECT_EQ(a->port(), 8080);
  EXPECT_EQ(a->to_string(), "127.0.0.1:8080");
  EXPECT_EQ(*a, Address::loopback_v4(8080));
}

TEST(Address, ParsesAndFormatsIpv6) {
  auto a = Address::parse("[::1]:443");
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->is_v6());
  EXPECT_EQ(a->port(), 443);
  EXPECT_EQ(a->to_string(), "[::1]:443");
  EXPECT_EQ(*a, Address::loopback_v6(443));
  auto b = Address::parse("[2001:db8::17]:0");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->to_string(), "[2001:db8::17]:0");
}

TEST(Address, RejectsBadTextWithInvalidArgument) {
  for (const char* bad :
       {"", ":", "127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:65536", "127.0.0.1:-1",
        "127.0.0.1:80x", "256.0.0.1:80", "localhost:80", "::1:80", "[::1]", "[::1]80", "[::g]:80",
        "[127.0.0.1]:80", "1.2.3.4:99999999999999999999"}) {
    auto a = Address::parse(bad);
    ASSERT_FALSE(a) << bad;
    EXPECT_EQ(a.error(), std::errc::invalid_argument) << bad;
  }
}

TEST(Address, SetPortKeepsHost) {
  auto a = Address::loopback_v6(1);
  a.set_port(65535);
  EXPECT_EQ(a.to_string(), "[::1]:65535");
}

}  // namespace
}  // namespace arbor
