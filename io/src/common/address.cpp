// Address on sockaddr_in / sockaddr_in6 / sockaddr_un: parsing and formatting numeric text only
// (no name resolution), the same code on every platform (common/sockaddr.hpp has the one
// difference, the headers).
//
// Invariant: storage_ holds a sockaddr_in, sockaddr_in6 or sockaddr_un and its family field says
// which; for IP everything else (port, native_size(), the text form) follows from that field,
// and for a sockaddr_un unix_size_ says how many bytes are in use (the kernel's length: an
// abstract name's is the only record of where it ends).
#include "arbor/address.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstring>

#include "common/sockaddr.hpp"

namespace arbor {

static_assert(sizeof(sockaddr_un) <= 112 && sizeof(sockaddr_in6) <= 112 &&
              alignof(sockaddr_in6) <= 8 && alignof(sockaddr_un) <= 8);

namespace {
constexpr std::uint32_t kPathOffset = offsetof(sockaddr_un, sun_path);
}  // namespace

namespace {
const sockaddr* as_sockaddr(const void* p) {
  return static_cast<const sockaddr*>(p);
}
}  // namespace

Address::Address() noexcept {
  std::memset(storage_, 0, sizeof storage_);
  auto* in = reinterpret_cast<sockaddr_in*>(storage_);
  in->sin_family = AF_INET;
}

namespace detail {

Result<std::pair<std::string_view, std::uint16_t>> split_host_port(std::string_view text) noexcept {
  const auto bad = std::make_error_code(std::errc::invalid_argument);
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad;
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad;
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad;  // a bare v6 needs brackets
  }
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc{} || end != port_text.data() + port_text.size() ||
      port > 65535)
    return bad;
  return std::pair{host, static_cast<std::uint16_t>(port)};
}

}  // namespace detail

Result<Address> Address::parse(std::string_view text) noexcept {
  const auto bad = std::make_error_code(std::errc::invalid_argument);
  auto split = detail::split_host_port(text);
  if (!split) return split.error();
  const auto [host, port] = *split;
  char buf[64];
  if (host.empty() || host.size() >= sizeof buf) return bad;
  std::memcpy(buf, host.data(), host.size());
  buf[host.size()] = '\0';

  Address address;
  std::memset(address.storage_, 0, sizeof address.storage_);
  if (text.front() == '[') {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(address.storage_);
    in6->sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, buf, &in6->sin6_addr) != 1) return bad;
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(address.storage_);
    in->sin_family = AF_INET;
    if (inet_pton(AF_INET, buf, &in->sin_addr) != 1) return bad;
  }
  address.set_port(port);
  return address;
}

Address Address::loopback_v4(std::uint16_t port) noexcept {
  Address address;
  auto* in = reinterpret_cast<sockaddr_in*>(address.storage_);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.set_port(port);
  return address;
}

Address Address::loopback_v6(std::uint16_t port) noexcept {
  Address address;
  std::memset(address.storage_, 0, sizeof address.storage_);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(address.storage_);
  in6->sin6_family = AF_INET6;
  in6->sin6_addr = in6addr_loopback;
  address.set_port(port);
  return address;
}

Result<Address> Address::unix_path(std::string_view path) noexcept {
  // Room for the terminating NUL the kernel (and every other reader) expects of a path.
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path) ||
      path.find('\0') != std::string_view::npos)
    return std::make_error_code(std::errc::invalid_argument);
  Address address;
  std::memset(address.storage_, 0, sizeof address.storage_);
  auto* un = reinterpret_cast<sockaddr_un*>(address.storage_);
  un->sun_family = AF_UNIX;
  std::memcpy(un->sun_path, path.data(), path.size());
  address.unix_size_ = kPathOffset + static_cast<std::uint32_t>(path.size()) + 1;
  return address;
}

Result<Address> Address::unix_abstract(std::string_view name) noexcept {
  if (name.empty() || name.size() + 1 > sizeof(sockaddr_un::sun_path))
    return std::make_error_code(std::errc::invalid_argument);
  Address address;
  std::memset(address.storage_, 0, sizeof address.storage_);
  auto* un = reinterpret_cast<sockaddr_un*>(address.storage_);
  un->sun_family = AF_UNIX;
  std::memcpy(un->sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  address.unix_size_ = kPathOffset + 1 + static_cast<std::uint32_t>(name.size());
  return address;
}

bool Address::is_v6() const noexcept {
  return as_sockaddr(storage_)->sa_family == AF_INET6;
}

bool Address::is_unix() const noexcept {
  return as_sockaddr(storage_)->sa_family == AF_UNIX;
}

bool Address::is_abstract() const noexcept {
  return is_unix() && unix_size_ > kPathOffset &&
         reinterpret_cast<const sockaddr_un*>(storage_)->sun_path[0] == '\0';
}

std::string_view Address::unix_name() const noexcept {
  if (!is_unix() || unix_size_ <= kPathOffset) return {};
  const char* path = reinterpret_cast<const sockaddr_un*>(storage_)->sun_path;
  const std::size_t room = std::min<std::size_t>(unix_size_, sizeof storage_) - kPathOffset;
  if (path[0] == '\0') return {path + 1, room - 1};
  std::size_t n = 0;  // a path ends at its NUL, or where the kernel's length ends
  while (n < room && path[n] != '\0')
    ++n;
  return {path, n};
}

void Address::set_native_size(std::uint32_t size) noexcept {
  // No name at all (not even a family): only an unbound Unix-domain sender is reported so (the
  // kernel writes nothing), so this is an unnamed Unix address, not what the storage held.
  if (size < sizeof(sockaddr::sa_family)) {
    std::memset(storage_, 0, sizeof storage_);
    reinterpret_cast<sockaddr_un*>(storage_)->sun_family = AF_UNIX;
  }
  unix_size_ = std::min<std::uint32_t>(size, sizeof storage_);
}

std::uint16_t Address::port() const noexcept {
  if (is_unix()) return 0;
  return is_v6() ? ntohs(reinterpret_cast<const sockaddr_in6*>(storage_)->sin6_port)
                 : ntohs(reinterpret_cast<const sockaddr_in*>(storage_)->sin_port);
}

void Address::set_port(std::uint16_t port) noexcept {
  if (is_unix()) return;
  if (is_v6())
    reinterpret_cast<sockaddr_in6*>(storage_)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in*>(storage_)->sin_port = htons(port);
}

std::uint32_t Address::native_size() const noexcept {
  if (is_unix()) return unix_size_;
  return is_v6() ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string Address::to_string() const {
  if (is_unix()) {
    if (is_abstract()) return "@" + std::string(unix_name());
    if (unix_name().empty()) return "(unnamed)";
    return std::string(unix_name());
  }
  char host[INET6_ADDRSTRLEN] = {};
  if (is_v6()) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(storage_)->sin6_addr, host,
              sizeof host);
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict, its bug 105329) on
    // "[" + std::string(...).
    std::string text(1, '[');
    text += host;
    text += "]:";
    text += std::to_string(port());
    return text;
  }
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(storage_)->sin_addr, host, sizeof host);
  std::string text(host);
  return text.append(":").append(std::to_string(port()));
}

bool operator==(const Address& a, const Address& b) noexcept {
  return a.native_size() == b.native_size() &&
         std::memcmp(a.storage_, b.storage_, a.native_size()) == 0;
}

}  // namespace arbor
