// PeerKey and PeerShares (http/src/peer_shares.hpp): which clients share one body-buffer share.
#include "peer_shares.hpp"

#include <gtest/gtest.h>

namespace arbor::http {
namespace {

PeerKey key(const char* text) {
  auto address = Address::parse(text);
  EXPECT_TRUE(address) << text;
  return address ? PeerKey::of(*address) : PeerKey{};
}

TEST(PeerKey, APortDoesNotMakeAnotherPeer) {
  EXPECT_EQ(key("192.0.2.1:1000"), key("192.0.2.1:2000"));
  EXPECT_NE(key("192.0.2.1:1000"), key("192.0.2.2:1000"));
}

TEST(PeerKey, OneIpv6HostIsItsSlash64) {
  // A host choosing addresses within its /64 is one peer; another /64 is another.
  EXPECT_EQ(key("[2001:db8:1:2::1]:80"), key("[2001:db8:1:2:ffff:ffff:ffff:ffff]:80"));
  EXPECT_NE(key("[2001:db8:1:2::1]:80"), key("[2001:db8:1:3::1]:80"));
}

TEST(PeerKey, AnIpv4MappedAddressIsItsIpv4Address) {
  // Two IPv4 clients seen through a dual-stack listener stay two peers (one /64 would join
  // them), and each is the same peer as on an IPv4 listener.
  EXPECT_NE(key("[::ffff:192.0.2.1]:80"), key("[::ffff:192.0.2.2]:80"));
  EXPECT_EQ(key("[::ffff:192.0.2.1]:80"), key("192.0.2.1:80"));
  // An IPv6 address whose first 8 bytes match an IPv4 key's is still another peer.
  EXPECT_NE(key("[c000:0201::]:80"), key("192.0.2.1:80"));
}

TEST(PeerKey, AnIpv4AddressEmbeddedByNat64Or6to4IsItsIpv4Address) {
  // Through NAT64's well-known prefix (64:ff9b::/96, RFC 6052) an IPv6-only server sees every
  // IPv4 client in one /64: each stays its own peer, the one it is on an IPv4 listener.
  EXPECT_NE(key("[64:ff9b::192.0.2.1]:80"), key("[64:ff9b::192.0.2.2]:80"));
  EXPECT_EQ(key("[64:ff9b::192.0.2.1]:80"), key("192.0.2.1:80"));
  // A 6to4 host (2002:V4ADDR::/48, RFC 3056) has 2^16 /64s from one IPv4 address: one peer.
  EXPECT_EQ(key("[2002:c000:201:1::1]:80"), key("[2002:c000:201:ffff::1]:80"));
  EXPECT_EQ(key("[2002:c000:201:1::1]:80"), key("192.0.2.1:80"));
  EXPECT_NE(key("[2002:c000:201::1]:80"), key("[2002:c000:202::1]:80"));
}

TEST(PeerShares, APeerGetsAtMostItsCapAndOthersKeepTheirs) {
  PeerShares shares(4);
  const PeerKey a = key("[2001:db8::1]:1"), a_other = key("[2001:db8::2]:1");
  const PeerKey b = key("192.0.2.9:1");
  EXPECT_TRUE(shares.try_add(a, 2));
  EXPECT_TRUE(shares.try_add(a_other, 2));  // the same /64: its second and last
  EXPECT_FALSE(shares.try_add(a, 2));
  EXPECT_EQ(shares.held(a), 2u);
  EXPECT_TRUE(shares.try_add(b, 2));
  shares.remove(a);
  EXPECT_EQ(shares.held(a_other), 1u);
  EXPECT_TRUE(shares.try_add(a, 2));
}

}  // namespace
}  // namespace arbor::http
