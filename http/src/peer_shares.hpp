// PeerShares: how many of the server's shared body buffers each peer holds, so that one peer (an
// IP address, whatever its ports) cannot take them all. Issue 32: 70 connections from one host
// trickling their bodies held every buffer, and every other body got a 503 for as long as the
// trickle lasted.
//
// Invariant: an entry exists exactly for each peer holding at least one buffer, so there are
// never more entries than buffers (ServerOptions::body_buffers): the vector is reserved for
// that many at construction and never grows past it, and a lookup scans only current holders.
// Not thread-safe: the server calls it under its bodies mutex, with the free list it guards.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <vector>

#include "arbor/address.hpp"

namespace arbor::http {

/// A peer: its IPv4 address, or its IPv6 /64, without the port. A /64 because one host is
/// usually given a whole /64 and can send from any of its 2^64 addresses: keyed on the full
/// address, one host would get a share per address it chose to use. An IPv6 address that
/// carries an IPv4 one is that IPv4 address: an IPv4-mapped one (::ffff:a.b.c.d, what a
/// dual-stack listener sees of IPv4 clients) and a NAT64 one (64:ff9b::a.b.c.d, what an
/// IPv6-only server behind NAT64 sees), whose /64 would put every IPv4 client in one share,
/// and a 6to4 one (2002:aabb:ccdd::/48), whose one IPv4 address would have 2^16 shares.
struct PeerKey {
  std::array<unsigned char, 8> ip{};
  bool v6 = false;
  friend bool operator==(const PeerKey&, const PeerKey&) = default;

  /// sockaddr_in and sockaddr_in6 have the same layout on every platform arbor builds for:
  /// the IPv4 address at byte 4, the IPv6 one at byte 8.
  static PeerKey of(const Address& peer) noexcept {
    PeerKey k;
    const auto* bytes = static_cast<const unsigned char*>(peer.native());
    if (!peer.is_v6()) {
      std::memcpy(k.ip.data(), bytes + 4, 4);
      return k;
    }
    const unsigned char* v6 = bytes + 8;
    static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static constexpr unsigned char kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (std::memcmp(v6, kMapped, sizeof kMapped) == 0 ||
        std::memcmp(v6, kNat64, sizeof kNat64) == 0) {
      std::memcpy(k.ip.data(), v6 + 12, 4);
      return k;
    }
    if (v6[0] == 0x20 && v6[1] == 0x02) {  // 6to4: the IPv4 address follows the prefix
      std::memcpy(k.ip.data(), v6 + 2, 4);
      return k;
    }
    k.v6 = true;
    std::memcpy(k.ip.data(), v6, 8);
    return k;
  }
};

class PeerShares {
 public:
  explicit PeerShares(std::size_t buffers) { entries_.reserve(buffers); }

  /// Counts one more buffer for `peer`; false (nothing counted) if it holds `cap` already.
  bool try_add(const PeerKey& peer, std::size_t cap) noexcept {
    auto it = find(peer);
    if (it == entries_.end()) {
      if (cap == 0 || entries_.size() == entries_.capacity()) return false;
      entries_.push_back({peer, 1});  // within the reserved capacity: no allocation
      return true;
    }
    if (it->held >= cap) return false;
    ++it->held;
    return true;
  }
  /// Counts one buffer back from `peer` (which must hold one).
  void remove(const PeerKey& peer) noexcept {
    auto it = find(peer);
    if (it == entries_.end()) return;
    if (--it->held == 0) {
      *it = entries_.back();
      entries_.pop_back();
    }
  }
  /// Buffers `peer` holds now.
  std::size_t held(const PeerKey& peer) const noexcept {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.key == peer; });
    return it == entries_.end() ? 0 : it->held;
  }

 private:
  struct Entry {
    PeerKey key;
    std::size_t held;
  };
  std::vector<Entry>::iterator find(const PeerKey& peer) noexcept {
    return std::find_if(entries_.begin(), entries_.end(),
                        [&](const Entry& e) { return e.key == peer; });
  }
  std::vector<Entry> entries_;
};

}  // namespace arbor::http
