// Address: a socket address, a small copyable value (namespace arbor: users name it directly;
// the io layer defines it): IPv4, IPv6, or a Unix-domain name (a filesystem path, or on Linux
// a name in the abstract namespace).
//
// Text forms: "1.2.3.4:80", "[::1]:80". parse() never resolves names (no DNS on the IO path);
// bad text is a clear error (std::errc::invalid_argument), never a crash. Unix addresses are
// made by unix_path() and unix_abstract(), never parsed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

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

  /// A Unix-domain address naming the filesystem path `path`. bind() makes the file (and fails
  /// with address_in_use if it exists); removing it afterwards is the caller's. Empty, holding
  /// a NUL, or too long for the platform's sun_path (107 bytes on Linux): invalid_argument.
  static Result<Address> unix_path(std::string_view path) noexcept;
  /// A Unix-domain address in Linux's abstract namespace: `name` (without the leading NUL the
  /// kernel's spelling has) names no file and goes away with the last socket bound to it.
  /// Empty or too long: invalid_argument. Other systems fail the bind or connect.
  static Result<Address> unix_abstract(std::string_view name) noexcept;

  bool is_v6() const noexcept;
  bool is_unix() const noexcept;
  /// A Unix address's path, or its abstract name when is_abstract(); empty for an unnamed
  /// socket (a socketpair's, or a client's that never bound) and for IP addresses.
  std::string_view unix_name() const noexcept;
  bool is_abstract() const noexcept;
  /// The port; 0 for a Unix address, whose set_port() changes nothing.
  std::uint16_t port() const noexcept;
  void set_port(std::uint16_t port) noexcept;
  /// "1.2.3.4:80", "[::1]:80"; a Unix path as it is, "@name" for an abstract name, "(unnamed)".
  std::string to_string() const;

  /// The platform sockaddr behind it (sockaddr_in, sockaddr_in6 or sockaddr_un), for the IO
  /// layer.
  const void* native() const noexcept { return storage_; }
  void* native() noexcept { return storage_; }
  /// Bytes of native() in use; capacity() bytes are writable (for accept/recvfrom).
  std::uint32_t native_size() const noexcept;
  /// For the IO layer, after the kernel wrote native(): the length it reported, which a Unix
  /// address needs (an IP address's follows from its family).
  void set_native_size(std::uint32_t size) noexcept;
  static constexpr std::uint32_t capacity() noexcept { return sizeof(storage_); }

  friend bool operator==(const Address& a, const Address& b) noexcept;

 private:
  // Fits sockaddr_un (110 bytes), sockaddr_in6 (28) and sockaddr_in (16).
  alignas(8) unsigned char storage_[112];
  std::uint32_t unix_size_ = 0;  // bytes of a sockaddr_un in use; unused for IP
};

namespace detail {
/// Splits "host:port" / "[v6]:port" (host returned without brackets, not checked further);
/// invalid_argument if the text is not of that shape or the port is not a number in 0..65535.
/// Address::parse and resolve() both read their text with it.
Result<std::pair<std::string_view, std::uint16_t>> split_host_port(std::string_view text) noexcept;
}  // namespace detail

}  // namespace arbor
