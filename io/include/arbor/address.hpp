// Address: an IPv4 or IPv6 socket address, a small copyable value (namespace arbor: users name
// it directly; the io layer defines it).
//
// Text forms: "1.2.3.4:80", "[::1]:80". parse() never resolves names (no DNS on the IO path);
// bad text is a clear error (std::errc::invalid_argument), never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "arbor/result.hpp"

namespace arbor {

class Address {
 public:
  /// 0.0.0.0:0
  Address() noexcept;

  /// "host:port" with a numeric IPv4 host, or "[v6]:port".
  static Result<Address> parse(std::string_view text) noexcept;
  /// 127.0.0.1:port and [::1]:port.
  static Address loopback_v4(std::uint16_t port) noexcept;
  static Address loopback_v6(std::uint16_t port) noexcept;

  bool is_v6() const noexcept;
  std::uint16_t port() const noexcept;
  void set_port(std::uint16_t port) noexcept;
  /// "1.2.3.4:80" or "[::1]:80".
  std::string to_string() const;

  /// The platform sockaddr behind it (sockaddr_in or sockaddr_in6), for the IO layer.
  const void* native() const noexcept { return storage_; }
  void* native() noexcept { return storage_; }
  /// Bytes of native() in use; capacity() bytes are writable (for accept/recvfrom).
  std::uint32_t native_size() const noexcept;
  static constexpr std::uint32_t capacity() noexcept { return sizeof(storage_); }

  friend bool operator==(const Address& a, const Address& b) noexcept;

 private:
  alignas(8) unsigned char storage_[28];  // fits sockaddr_in6 (28 bytes) and sockaddr_in (16)
};

}  // namespace arbor
