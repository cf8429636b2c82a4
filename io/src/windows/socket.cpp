// The public synchronous socket API (arbor/io/socket.hpp) on Winsock.
//
// Same contract as the POSIX version: every failure is a value, errno-valued (winsock.hpp),
// handles are non-blocking and not inherited by child processes (the close-on-exec of Windows).
// Sockets are created overlapped, as the IOCP engine will need them. Where Windows has no
// counterpart of a POSIX behaviour, the function says so below rather than pretending.
#include "arbor/io/socket.hpp"

#include <winsock2.h>
#include <ws2tcpip.h>

#include <cerrno>

#include "arbor/internal/log.hpp"
#include "windows/winsock.hpp"

namespace arbor::io {
namespace {

using windows::last_socket_error;

SOCKET socket_of(Handle h) noexcept {
  return static_cast<SOCKET>(h);
}

std::error_code check(int status) noexcept {
  return status == SOCKET_ERROR ? last_socket_error() : std::error_code{};
}

struct OptionName {
  int level;
  int name;
};
// reuse_address and reuse_port have no entry: see set_option() below.
OptionName native(BoolOption option) noexcept {
  switch (option) {
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
    default:
      return {SOL_SOCKET, SO_KEEPALIVE};
  }
}
OptionName native(IntOption option) noexcept {
  return option == IntOption::receive_buffer ? OptionName{SOL_SOCKET, SO_RCVBUF}
                                             : OptionName{SOL_SOCKET, SO_SNDBUF};
}

std::error_code no_such_option() noexcept {
  return errno_code(ENOPROTOOPT);  // what Linux reports for an option it does not have
}

}  // namespace

Result<Handle> open_socket(const Address& family_of, SocketType type) noexcept {
  if (auto ec = windows::winsock_start()) return ec;
  const int family = family_of.is_unix() ? AF_UNIX : family_of.is_v6() ? AF_INET6 : AF_INET;
  const int kind = type == SocketType::tcp ? SOCK_STREAM : SOCK_DGRAM;
  const SOCKET s =
      ::WSASocketW(family, kind, 0, nullptr, 0, WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
  if (s == INVALID_SOCKET) return last_socket_error();
  u_long non_blocking = 1;
  if (::ioctlsocket(s, FIONBIO, &non_blocking) == SOCKET_ERROR) {
    const auto ec = last_socket_error();
    ::closesocket(s);
    return ec;
  }
  return static_cast<Handle>(s);
}

// Windows has AF_UNIX stream sockets (10 1803 on) but no socketpair, and no SO_PEERCRED.
Result<HandlePair> socket_pair(SocketType) noexcept {
  return std::make_error_code(std::errc::operation_not_supported);
}

Result<PeerCredentials> peer_credentials(Handle) noexcept {
  return std::make_error_code(std::errc::operation_not_supported);
}

std::error_code bind(Handle handle, const Address& address) noexcept {
  return check(::bind(socket_of(handle), static_cast<const sockaddr*>(address.native()),
                      static_cast<int>(address.native_size())));
}

// Winsock's connect() on a datagram socket, as on POSIX, only records the peer: it never waits.
std::error_code connect_now(Handle handle, const Address& peer) noexcept {
  return check(::connect(socket_of(handle), static_cast<const sockaddr*>(peer.native()),
                         static_cast<int>(peer.native_size())));
}

std::error_code listen(Handle handle, int backlog) noexcept {
  return check(::listen(socket_of(handle), backlog));
}

// Unlike POSIX, Windows leaves a call already pending on the socket pending across shutdown():
// a receive across SD_RECEIVE, and a send across SD_SEND, whose FIN waits until the send has
// moved everything (wine defers it the same way), so a send that waits for a peer that reads
// nothing would wait for ever. So the socket's calls are cancelled after it: the IOCP engine
// issues again a call it did not cancel itself, and on the shut side that call fails at once
// (a receive reports end of stream, a send EPIPE, as POSIX does); on the side still open it
// waits on as before. A cancelled send that had moved bytes reports those, and the next send
// meets the shut side. Tests: SocketTest.ShutdownWrite* (wine; a report, vibe-d/eventcore#225,
// says a cancelled receive on some Windows versions leaves the read side closed, which
// ShutdownWriteLeavesAPendingReadWaiting would catch on a real Windows runner).
std::error_code shutdown(Handle handle, ShutdownHow how) noexcept {
  const int native = how == ShutdownHow::read    ? SD_RECEIVE
                     : how == ShutdownHow::write ? SD_SEND
                                                 : SD_BOTH;
  if (auto failed = check(::shutdown(socket_of(handle), native))) return failed;
  // The direction is shut down by now: a failed cancel is not this call's failure (its pending
  // calls then end as Windows ends them), so it is logged, not returned.
  if (!::CancelIoEx(reinterpret_cast<HANDLE>(handle), nullptr) &&
      ::GetLastError() != ERROR_NOT_FOUND)
    log::warn("shutdown: CancelIoEx failed ({}); calls pending on the socket were not reissued",
              ::GetLastError());
  return {};
}

Result<std::size_t> bytes_readable(Handle handle) noexcept {
  u_long n = 0;
  if (auto failed = check(::ioctlsocket(socket_of(handle), FIONREAD, &n))) return failed;
  return static_cast<std::size_t>(n);
}

void close_handle(Handle handle) noexcept {
  if (handle != kInvalidHandle) ::closesocket(socket_of(handle));
}

// reuse_address: POSIX's SO_REUSEADDR lets a listener bind a port whose old connections linger
// in TIME_WAIT, which Windows allows anyway. Windows' SO_REUSEADDR means something else, that a
// second socket may bind a port already in use and take over its traffic, which arbor never
// wants (libuv, Go and Rust's std do not set it on Windows either). So the option is always on
// in the POSIX sense, setting it changes nothing, and reading it says true.
// reuse_port (SO_REUSEPORT, load-balanced listeners) has no Windows counterpart: ENOPROTOOPT.
std::error_code set_option(Handle handle, BoolOption option, bool value) noexcept {
  if (option == BoolOption::reuse_address) return {};
  if (option == BoolOption::reuse_port) return no_such_option();
  const auto [level, name] = native(option);
  const BOOL v = value ? TRUE : FALSE;
  return check(
      ::setsockopt(socket_of(handle), level, name, reinterpret_cast<const char*>(&v), sizeof v));
}

Result<bool> get_option(Handle handle, BoolOption option) noexcept {
  if (option == BoolOption::reuse_address) return true;
  if (option == BoolOption::reuse_port) return no_such_option();
  const auto [level, name] = native(option);
  // Zeroed first: Windows writes a single byte for some boolean options (TCP_NODELAY).
  BOOL v = FALSE;
  int len = sizeof v;
  if (auto ec =
          check(::getsockopt(socket_of(handle), level, name, reinterpret_cast<char*>(&v), &len)))
    return ec;
  return v != FALSE;
}

std::error_code set_option(Handle handle, IntOption option, int value) noexcept {
  const auto [level, name] = native(option);
  return check(::setsockopt(socket_of(handle), level, name, reinterpret_cast<const char*>(&value),
                            sizeof value));
}

Result<int> get_option(Handle handle, IntOption option) noexcept {
  const auto [level, name] = native(option);
  int v = 0;
  int len = sizeof v;
  if (auto ec =
          check(::getsockopt(socket_of(handle), level, name, reinterpret_cast<char*>(&v), &len)))
    return ec;
  return v;
}

std::error_code set_linger_reset(Handle handle) noexcept {
  const linger l{1, 0};
  return check(::setsockopt(socket_of(handle), SOL_SOCKET, SO_LINGER,
                            reinterpret_cast<const char*>(&l), sizeof l));
}

std::error_code multicast_membership_v4(Handle handle, const Address& group,
                                        const Address& local_interface, Membership how) noexcept {
  if (group.is_v6() || group.is_unix() || local_interface.is_v6() || local_interface.is_unix())
    return std::make_error_code(std::errc::invalid_argument);
  ip_mreq request{};
  request.imr_multiaddr = static_cast<const sockaddr_in*>(group.native())->sin_addr;
  request.imr_interface = static_cast<const sockaddr_in*>(local_interface.native())->sin_addr;
  if ((ntohl(request.imr_multiaddr.s_addr) & 0xf0000000u) != 0xe0000000u)  // 224.0.0.0/4
    return std::make_error_code(std::errc::invalid_argument);
  const int name = how == Membership::join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP;
  return check(::setsockopt(socket_of(handle), IPPROTO_IP, name,
                            reinterpret_cast<const char*>(&request), sizeof request));
}

std::error_code multicast_membership_v6(Handle handle, const Address& group,
                                        std::uint32_t interface_index, Membership how) noexcept {
  if (!group.is_v6() || group.is_unix()) return std::make_error_code(std::errc::invalid_argument);
  ipv6_mreq request{};
  request.ipv6mr_multiaddr = static_cast<const sockaddr_in6*>(group.native())->sin6_addr;
  request.ipv6mr_interface = interface_index;
  if (request.ipv6mr_multiaddr.s6_addr[0] != 0xff)  // ff00::/8
    return std::make_error_code(std::errc::invalid_argument);
  const int name = how == Membership::join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP;
  return check(::setsockopt(socket_of(handle), IPPROTO_IPV6, name,
                            reinterpret_cast<const char*>(&request), sizeof request));
}

std::error_code set_multicast_interface_v4(Handle handle, const Address& local_interface) noexcept {
  if (local_interface.is_v6() || local_interface.is_unix())
    return std::make_error_code(std::errc::invalid_argument);
  const in_addr a = static_cast<const sockaddr_in*>(local_interface.native())->sin_addr;
  return check(::setsockopt(socket_of(handle), IPPROTO_IP, IP_MULTICAST_IF,
                            reinterpret_cast<const char*>(&a), sizeof a));
}

std::error_code set_linger(Handle handle, std::optional<std::chrono::seconds> timeout) noexcept {
  if (timeout && (timeout->count() < 0 || timeout->count() > 65535))
    return std::make_error_code(std::errc::invalid_argument);
  const linger l{static_cast<u_short>(timeout ? 1 : 0),
                 static_cast<u_short>(timeout ? timeout->count() : 0)};
  return check(::setsockopt(socket_of(handle), SOL_SOCKET, SO_LINGER,
                            reinterpret_cast<const char*>(&l), sizeof l));
}

Result<std::optional<std::chrono::seconds>> get_linger(Handle handle) noexcept {
  linger l{};
  int len = sizeof l;
  if (auto ec = check(::getsockopt(socket_of(handle), SOL_SOCKET, SO_LINGER,
                                   reinterpret_cast<char*>(&l), &len)))
    return ec;
  if (l.l_onoff == 0) return std::optional<std::chrono::seconds>{};
  return std::optional<std::chrono::seconds>{std::chrono::seconds(l.l_linger)};
}

// The per-socket keep-alive options of Windows 10 1709 and later (ws2ipdef.h; older mingw
// headers lack them). Older Windows, and wine where it lacks them, fail the setsockopt, which
// is reported as operation_not_supported: SIO_KEEPALIVE_VALS could set idle and interval there
// but not the count, and half the timing is not what the caller asked for.
#ifndef TCP_KEEPIDLE
#define TCP_KEEPIDLE 3  // TCP_KEEPALIVE
#endif
#ifndef TCP_KEEPCNT
#define TCP_KEEPCNT 16
#endif
#ifndef TCP_KEEPINTVL
#define TCP_KEEPINTVL 17
#endif

std::error_code set_keep_alive(Handle handle, const KeepAlive& timing) noexcept {
  constexpr auto kMax = std::chrono::seconds(32767);  // as the POSIX version, one contract
  if (timing.idle.count() < 1 || timing.interval.count() < 1 || timing.count < 1 ||
      timing.idle > kMax || timing.interval > kMax || timing.count > 127)
    return std::make_error_code(std::errc::invalid_argument);
  const SOCKET s = socket_of(handle);
  const DWORD idle = static_cast<DWORD>(timing.idle.count());
  const DWORD interval = static_cast<DWORD>(timing.interval.count());
  const DWORD count = static_cast<DWORD>(timing.count);
  const BOOL on = TRUE;
  auto set = [s](int level, int name, const void* value, int size) {
    return ::setsockopt(s, level, name, static_cast<const char*>(value), size) == 0;
  };
  if (!set(IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) ||
      !set(IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) ||
      !set(IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count)) {
    const int error = ::WSAGetLastError();
    if (error == WSAENOPROTOOPT || error == WSAEINVAL)
      return std::make_error_code(std::errc::operation_not_supported);
    return windows::from_wsa_error(error);
  }
  return check(
      ::setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, reinterpret_cast<const char*>(&on), sizeof on));
}

Result<KeepAlive> get_keep_alive(Handle handle) noexcept {
  const SOCKET s = socket_of(handle);
  DWORD idle = 0, interval = 0, count = 0;
  int a = sizeof idle, b = sizeof interval, c = sizeof count;
  if (::getsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, reinterpret_cast<char*>(&idle), &a) != 0 ||
      ::getsockopt(s, IPPROTO_TCP, TCP_KEEPINTVL, reinterpret_cast<char*>(&interval), &b) != 0 ||
      ::getsockopt(s, IPPROTO_TCP, TCP_KEEPCNT, reinterpret_cast<char*>(&count), &c) != 0) {
    const int error = ::WSAGetLastError();
    if (error == WSAENOPROTOOPT || error == WSAEINVAL)
      return std::make_error_code(std::errc::operation_not_supported);
    return windows::from_wsa_error(error);
  }
  return KeepAlive{std::chrono::seconds(idle), std::chrono::seconds(interval),
                   static_cast<int>(count)};
}

Result<Address> local_address(Handle handle) noexcept {
  Address address;
  int len = static_cast<int>(Address::capacity());
  if (auto ec =
          check(::getsockname(socket_of(handle), static_cast<sockaddr*>(address.native()), &len)))
    return ec;
  address.set_native_size(static_cast<std::uint32_t>(len));
  return address;
}

Result<Address> peer_address(Handle handle) noexcept {
  Address address;
  int len = static_cast<int>(Address::capacity());
  if (auto ec =
          check(::getpeername(socket_of(handle), static_cast<sockaddr*>(address.native()), &len)))
    return ec;
  address.set_native_size(static_cast<std::uint32_t>(len));
  return address;
}

// Windows has no SIGPIPE: a send to a closed peer is already an error (WSAECONNRESET).
void ignore_sigpipe() noexcept {}

}  // namespace arbor::io
