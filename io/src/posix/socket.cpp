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
  }
  return {SOL_SOCKET, SO_REUSEADDR};
}
OptionName native(IntOption option) noexcept {
  return option == IntOption::receive_buffer ? OptionName{SOL_SOCKET, SO_RCVBUF}
                                             : OptionName{SOL_SOCKET, SO_SNDBUF};
}

}  // namespace

Result<Handle> open_socket(const Address& family_of, SocketType type) noexcept {
  const int family = family_of.is_v6() ? AF_INET6 : AF_INET;
  const int kind =
      (type == SocketType::tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC;
  const int fd = ::socket(family, kind, 0);
  if (fd < 0) return last_error();
  return Handle{fd};
}

std::error_code bind(Handle handle, const Address& address) noexcept {
  if (::bind(fd_of(handle), static_cast<const sockaddr*>(address.native()),
             address.native_size()) != 0)
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

Result<Address> local_address(Handle handle) noexcept {
  Address address;
  socklen_t len = Address::capacity();
  if (::getsockname(fd_of(handle), static_cast<sockaddr*>(address.native()), &len) != 0)
    return last_error();
  return address;
}

Result<Address> peer_address(Handle handle) noexcept {
  Address address;
  socklen_t len = Address::capacity();
  if (::getpeername(fd_of(handle), static_cast<sockaddr*>(address.native()), &len) != 0)
    return last_error();
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
