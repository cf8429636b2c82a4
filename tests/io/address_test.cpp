#include "arbor/address.hpp"

#include <gtest/gtest.h>

#include <string>

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

TEST(Address, UnixPathsAndAbstractNames) {
  auto path = Address::unix_path("/tmp/a.sock");
  ASSERT_TRUE(path);
  EXPECT_TRUE(path->is_unix());
  EXPECT_FALSE(path->is_v6());
  EXPECT_FALSE(path->is_abstract());
  EXPECT_EQ(path->unix_name(), "/tmp/a.sock");
  EXPECT_EQ(path->to_string(), "/tmp/a.sock");
  EXPECT_EQ(path->port(), 0);
  path->set_port(80);  // nothing to set
  EXPECT_EQ(*path, *Address::unix_path("/tmp/a.sock"));
  EXPECT_NE(*path, *Address::unix_path("/tmp/b.sock"));

  auto name = Address::unix_abstract("svc");
  ASSERT_TRUE(name);
  EXPECT_TRUE(name->is_abstract());
  EXPECT_EQ(name->unix_name(), "svc");
  EXPECT_EQ(name->to_string(), "@svc");
  // Abstract names end where their length says: "svc" and "svc2" differ, as do a path and a
  // name with the same text.
  EXPECT_NE(*name, *Address::unix_abstract("svc2"));
  EXPECT_NE(*Address::unix_abstract("/tmp/a.sock"), *path);
  EXPECT_NE(*name, Address::loopback_v4(0));
  EXPECT_FALSE(Address::loopback_v4(1).is_unix());
  EXPECT_TRUE(Address::loopback_v4(1).unix_name().empty());
}

TEST(Address, UnixNamesThatCannotFitAreInvalidArgument) {
  EXPECT_TRUE(Address::unix_path(std::string(Address::capacity() / 2, 'p')));
  EXPECT_EQ(Address::unix_path(std::string(108, 'p')).error(), std::errc::invalid_argument);
  EXPECT_EQ(Address::unix_path("").error(), std::errc::invalid_argument);
  EXPECT_EQ(Address::unix_abstract(std::string(108, 'n')).error(), std::errc::invalid_argument);
}

}  // namespace
}  // namespace arbor
