#include "arbor/io/socket.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "posix/socket_calls.hpp"

namespace arbor::io {
namespace {

std::error_code last_error() noexcept {
  return {errno, std::system_category()};
}
int fd_of(Handle h) noexcept {
  return static_cast<int>(h);
}

struct OptionName {
  int level;
  int name;
};
OptionName native(BoolOption option) noexcept {
  switch (option) {
    case BoolOption::reuse_address:
      return {SOL_SOCKET, SO_REUSEADDR};
    case BoolOption::reuse_port:
      return {SOL_SOCKET, SO_REUSEPORT};
    case BoolOption::no_delay:
      return {IPPROTO_TCP, TCP_NODELAY};
    case BoolOption::keep_alive:
      return {SOL_SOCKET, SO_KEEPALIVE};
    case BoolOption::v6_only:
      return {IPPROTO_IPV6, IPV6_V6ONLY};
    case BoolOption::broadcast:
      return {SOL_SOCKET, SO_BROADCAST};
    case BoolOption::multicast_loop_v4:
      return {IPPROTO_IP, IP_MULTICAST_LOOP};
  }
  return {SOL_SOCKET, SO_REUSEADDR};
}
// The idle time before keep-alive's first probe: TCP_KEEPIDLE, which macOS calls TCP_KEEPALIVE.
#if defined(__APPLE__)
constexpr int kKeepIdle = TCP_KEEPALIVE;
#else
constexpr int kKeepIdle = TCP_KEEPIDLE;
#endif

// A linger time in seconds. macOS's SO_LINGER takes clock ticks (its kernel keeps the time as
// a short count of 10 ms ticks) and SO_LINGER_SEC seconds, so 327 s is as long as it holds.
#if defined(__APPLE__)
constexpr int kLingerSeconds = SO_LINGER_SEC;
constexpr std::int64_t kMaxLingerSeconds = 327;
#else
constexpr int kLingerSeconds = SO_LINGER;
constexpr std::int64_t kMaxLingerSeconds = 65535;
#endif

OptionName native(IntOption option) noexcept {
  return option == IntOption::receive_buffer ? OptionName{SOL_SOCKET, SO_RCVBUF}
                                             : OptionName{SOL_SOCKET, SO_SNDBUF};
}

}  // namespace

Result<Handle> open_socket(const Address& family_of, SocketType type) noexcept {
  const int family = family_of.is_unix() ? AF_UNIX : family_of.is_v6() ? AF_INET6 : AF_INET;
#if defined(__APPLE__)
  const int fd = ::socket(family, type == SocketType::tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
  if (fd < 0) return last_error();
  if (const int e = posix::set_socket_flags(fd); e != 0) {
    ::close(fd);
    return std::error_code(-e, std::system_category());
  }
#else
  const int kind =
      (type == SocketType::tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC;
  const int fd = ::socket(family, kind, 0);
  if (fd < 0) return last_error();
#endif
  return Handle{fd};
}

Result<HandlePair> socket_pair(SocketType type) noexcept {
#if defined(__APPLE__)
  int fds[2];
  if (::socketpair(AF_UNIX, type == SocketType::stream ? SOCK_STREAM : SOCK_DGRAM, 0, fds) != 0)
    return last_error();
  for (const int fd : fds) {
    if (const int e = posix::set_socket_flags(fd); e != 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return std::error_code(-e, std::system_category());
    }
  }
#else
  const int kind =
      (type == SocketType::stream ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC;
  int fds[2];
  if (::socketpair(AF_UNIX, kind, 0, fds) != 0) return last_error();
#endif
  return HandlePair{fds[0], fds[1]};
}

Result<PeerCredentials> peer_credentials(Handle handle) noexcept {
#if defined(SO_PEERCRED)
  ucred credentials{};
  socklen_t len = sizeof credentials;
  if (::getsockopt(fd_of(handle), SOL_SOCKET, SO_PEERCRED, &credentials, &len) != 0)
    return last_error();
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
#else
  (void)handle;
  return std::make_error_code(std::errc::operation_not_supported);
#endif
}

std::error_code bind(Handle handle, const Address& address) noexcept {
  if (::bind(fd_of(handle), static_cast<const sockaddr*>(address.native()),
             address.native_size()) != 0)
    return last_error();
  return {};
}

std::error_code connect_now(Handle handle, const Address& peer) noexcept {
  if (::connect(fd_of(handle), static_cast<const sockaddr*>(peer.native()), peer.native_size()) !=
      0)
    return last_error();
  return {};
}

std::error_code listen(Handle handle, int backlog) noexcept {
  if (::listen(fd_of(handle), backlog) != 0) return last_error();
  return {};
}

std::error_code shutdown(Handle handle, ShutdownHow how) noexcept {
  const int native = how == ShutdownHow::read    ? SHUT_RD
                     : how == ShutdownHow::write ? SHUT_WR
                                                 : SHUT_RDWR;
  if (::shutdown(fd_of(handle), native) != 0) return last_error();
  return {};
}

Result<std::size_t> bytes_readable(Handle handle) noexcept {
  int n = 0;
  if (::ioctl(fd_of(handle), FIONREAD, &n) != 0) return last_error();
  return static_cast<std::size_t>(n);
}

void close_handle(Handle handle) noexcept {
  if (handle != kInvalidHandle) ::close(fd_of(handle));
}

std::error_code set_option(Handle handle, BoolOption option, bool value) noexcept {
  const auto [level, name] = native(option);
  const int v = value ? 1 : 0;
  if (::setsockopt(fd_of(handle), level, name, &v, sizeof v) != 0) return last_error();
  return {};
}

Result<bool> get_option(Handle handle, BoolOption option) noexcept {
  const auto [level, name] = native(option);
  int v = 0;
  socklen_t len = sizeof v;
  if (::getsockopt(fd_of(handle), level, name, &v, &len) != 0) return last_error();
  return v != 0;
}

std::error_code set_option(Handle handle, IntOption option, int value) noexcept {
  const auto [level, name] = native(option);
  if (::setsockopt(fd_of(handle), level, name, &value, sizeof value) != 0) return last_error();
  return {};
}

Result<int> get_option(Handle handle, IntOption option) noexcept {
  const auto [level, name] = native(option);
  int v = 0;
  socklen_t len = sizeof v;
  if (::getsockopt(fd_of(handle), level, name, &v, &len) != 0) return last_error();
  return v;
}

std::error_code set_linger_reset(Handle handle) noexcept {
  const linger l{1, 0};
  if (::setsockopt(fd_of(handle), SOL_SOCKET, SO_LINGER, &l, sizeof l) != 0) return last_error();
  return {};
}

std::error_code multicast_membership_v4(Handle handle, const Address& group,
                                        const Address& local_interface, Membership how) noexcept {
  if (group.is_v6() || group.is_unix() || local_interface.is_v6() || local_interface.is_unix())
    return std::make_error_code(std::errc::invalid_argument);
  ip_mreq request{};
  request.imr_multiaddr = static_cast<const sockaddr_in*>(group.native())->sin_addr;
  request.imr_interface = static_cast<const sockaddr_in*>(local_interface.native())->sin_addr;
  // Checked here: Linux accepts a unicast "group" for a leave, and reports EADDRNOTAVAIL.
  if (!IN_MULTICAST(ntohl(request.imr_multiaddr.s_addr)))
    return std::make_error_code(std::errc::invalid_argument);
  const int name = how == Membership::join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP;
  if (::setsockopt(fd_of(handle), IPPROTO_IP, name, &request, sizeof request) != 0)
    return last_error();
  return {};
}

std::error_code multicast_membership_v6(Handle handle, const Address& group,
                                        std::uint32_t interface_index, Membership how) noexcept {
  if (!group.is_v6() || group.is_unix()) return std::make_error_code(std::errc::invalid_argument);
  ipv6_mreq request{};
  request.ipv6mr_multiaddr = static_cast<const sockaddr_in6*>(group.native())->sin6_addr;
  request.ipv6mr_interface = interface_index;
  if (!IN6_IS_ADDR_MULTICAST(&request.ipv6mr_multiaddr))
    return std::make_error_code(std::errc::invalid_argument);
  const int name = how == Membership::join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP;
  if (::setsockopt(fd_of(handle), IPPROTO_IPV6, name, &request, sizeof request) != 0)
    return last_error();
  return {};
}

std::error_code set_multicast_interface_v4(Handle handle, const Address& local_interface) noexcept {
  if (local_interface.is_v6() || local_interface.is_unix())
    return std::make_error_code(std::errc::invalid_argument);
  const in_addr a = static_cast<const sockaddr_in*>(local_interface.native())->sin_addr;
  if (::setsockopt(fd_of(handle), IPPROTO_IP, IP_MULTICAST_IF, &a, sizeof a) != 0)
    return last_error();
  return {};
}

std::error_code set_linger(Handle handle, std::optional<std::chrono::seconds> timeout) noexcept {
  if (timeout && (timeout->count() < 0 || timeout->count() > kMaxLingerSeconds))
    return std::make_error_code(std::errc::invalid_argument);
  const linger l{timeout ? 1 : 0, timeout ? static_cast<int>(timeout->count()) : 0};
  if (::setsockopt(fd_of(handle), SOL_SOCKET, kLingerSeconds, &l, sizeof l) != 0)
    return last_error();
  return {};
}

Result<std::optional<std::chrono::seconds>> get_linger(Handle handle) noexcept {
  linger l{};
  socklen_t len = sizeof l;
  if (::getsockopt(fd_of(handle), SOL_SOCKET, kLingerSeconds, &l, &len) != 0) return last_error();
  if (l.l_onoff == 0) return std::optional<std::chrono::seconds>{};
  return std::optional<std::chrono::seconds>{std::chrono::seconds(l.l_linger)};
}

std::error_code set_keep_alive(Handle handle, const KeepAlive& timing) noexcept {
  constexpr auto kMax = std::chrono::seconds(32767);  // Linux's limit for idle and interval
  if (timing.idle.count() < 1 || timing.interval.count() < 1 || timing.count < 1 ||
      timing.idle > kMax || timing.interval > kMax || timing.count > 127)
    return std::make_error_code(std::errc::invalid_argument);
  const int fd = fd_of(handle);
  const int idle = static_cast<int>(timing.idle.count());
  const int interval = static_cast<int>(timing.interval.count());
  const int on = 1;
  // The timing first: a failure leaves keep-alive as it was.
  if (::setsockopt(fd, IPPROTO_TCP, kKeepIdle, &idle, sizeof idle) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &timing.count, sizeof timing.count) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0)
    return last_error();
  return {};
}

Result<KeepAlive> get_keep_alive(Handle handle) noexcept {
  const int fd = fd_of(handle);
  int idle = 0, interval = 0, count = 0;
  socklen_t a = sizeof idle, b = sizeof interval, c = sizeof count;
  if (::getsockopt(fd, IPPROTO_TCP, kKeepIdle, &idle, &a) != 0 ||
      ::getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, &b) != 0 ||
      ::getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, &c) != 0)
    return last_error();
  return KeepAlive{std::chrono::seconds(idle), std::chrono::seconds(interval), count};
}

Result<Address> local_address(Handle handle) noexcept {
  Address address;
  socklen_t len = Address::capacity();
  if (::getsockname(fd_of(handle), static_cast<sockaddr*>(address.native()), &len) != 0)
    return last_error();
  address.set_native_size(len);
  return address;
}

Result<Address> peer_address(Handle handle) noexcept {
  Address address;
  socklen_t len = Address::capacity();
  if (::getpeername(fd_of(handle), static_cast<sockaddr*>(address.native()), &len) != 0)
    return last_error();
  address.set_native_size(len);
  return address;
}

void ignore_sigpipe() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = SIG_IGN;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGPIPE, &action, nullptr);
  });
}

}  // namespace arbor::io
