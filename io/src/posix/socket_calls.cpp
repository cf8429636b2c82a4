// The non-blocking system call behind each operation kind. Readiness engines call it first
// speculatively and then again on every readiness; io_uring uses it for speculative sends.
#include "socket_calls.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace arbor::io::posix {

static_assert(sizeof(ConstBuffer) == sizeof(iovec) && alignof(ConstBuffer) == alignof(iovec));

namespace {

std::int64_t error_result() noexcept {
  return -static_cast<std::int64_t>(errno);
}
constexpr int kSendNow = kSendFlags | MSG_DONTWAIT;

bool is_listening(int fd) noexcept {
  int listening = 0;
  socklen_t size = sizeof listening;
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0 && listening != 0;
}

}  // namespace

std::int64_t connect_step(const Operation& op, Handle handle, bool& started) noexcept {
  const int fd = static_cast<int>(handle);
  if (!started) {
    started = true;
    if (::connect(fd, static_cast<const sockaddr*>(op.address->native()),
                  op.address->native_size()) == 0)
      return 0;
    if (errno != EINPROGRESS) return error_result();
    return -EAGAIN;
  }
  // In progress: readiness may be spurious, so ask poll() before trusting SO_ERROR.
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) == 0) return -EAGAIN;
  int error = 0;
  socklen_t len = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) return error_result();
  if (error != 0) return -static_cast<std::int64_t>(error);
  // Writable with no error is done only with a peer. Without one the connect failed and its
  // error was taken before us: libkqueue reads SO_ERROR (which clears it) inside kevent() to
  // fill EV_EOF's fflags, and its report, with the error, is on its way to the readiness core
  // (Readiness::taken_error), which gives it to this connect in place of the -EAGAIN.
  // (SocketTest.ConnectionRefused/kqueue failed 1 run in 18 without this.)
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
    return errno == ENOTCONN ? -EAGAIN : error_result();
  return 0;
}

std::int64_t perform(Operation& op, Handle handle) noexcept {
  const int fd = static_cast<int>(handle);
  ssize_t r = -1;
  switch (op.kind) {
    case OpKind::receive:
      r = ::recv(fd, op.data, op.size, MSG_DONTWAIT);
      break;
    case OpKind::send:
      r = ::send(fd, op.data, op.size, kSendNow);
      break;
    case OpKind::send_vectored: {
      msghdr m{};
      m.msg_iov = static_cast<iovec*>(op.data);
      m.msg_iovlen = static_cast<decltype(m.msg_iovlen)>(op.size);  // an int on the BSDs, macOS
      r = ::sendmsg(fd, &m, kSendNow);
      break;
    }
    case OpKind::accept: {
      socklen_t len = Address::capacity();
      sockaddr* addr = op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr;
#if defined(__APPLE__)
      r = ::accept(fd, addr, addr ? &len : nullptr);
      if (r >= 0) {
        if (const int e = set_socket_flags(static_cast<int>(r)); e != 0) {
          ::close(static_cast<int>(r));
          return e;
        }
      }
#else
      r = ::accept4(fd, addr, addr ? &len : nullptr, kAcceptFlags);
#endif
      if (r >= 0 && addr) op.address->set_native_size(len);
      break;
    }
    case OpKind::connect:
      return -EINVAL;  // connect_step()
    case OpKind::receive_from: {
#if defined(__linux__)
      // MSG_TRUNC: the datagram's whole length comes back, so one longer than the buffer is
      // seen (the kernel has discarded its tail; truncated_datagram() makes that the error).
      socklen_t len = Address::capacity();
      r = ::recvfrom(fd, op.data, op.size, MSG_DONTWAIT | kDatagramReceiveFlags,
                     op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr,
                     op.address ? &len : nullptr);
      if (r >= 0 && op.address) op.address->set_native_size(len);
      if (r >= 0) return truncated_datagram(op, r);
#else
      // The BSDs and macOS take MSG_TRUNC only as a result (msg_flags): recvfrom() would give
      // a longer datagram's first bytes and no sign of the rest, so recvmsg() asks.
      iovec buffer{op.data, op.size};
      msghdr m{};
      m.msg_name = op.address ? op.address->native() : nullptr;
      m.msg_namelen = op.address ? Address::capacity() : 0;
      m.msg_iov = &buffer;
      m.msg_iovlen = 1;
      r = ::recvmsg(fd, &m, MSG_DONTWAIT);
      if (r >= 0 && op.address) op.address->set_native_size(m.msg_namelen);
      if (r >= 0) return (m.msg_flags & MSG_TRUNC) != 0 ? -EMSGSIZE : r;
#endif
      break;
    }
    case OpKind::send_to:
      r = ::sendto(fd, op.data, op.size, kSendNow,
                   static_cast<const sockaddr*>(op.address->native()), op.address->native_size());
      break;
    case OpKind::readable: {
      // A peek of one byte waits exactly when a receive would, and takes nothing.
      char byte;
      r = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r > 0) r = 0;
      // A listener has no bytes to peek at (Unix-domain ones say EINVAL, TCP ones ENOTCONN):
      // for it, readable means an accept would not wait, which poll() tells.
      if (r < 0 && (errno == EINVAL || errno == ENOTCONN) && is_listening(fd)) {
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, 0);
        if (ready < 0) return error_result();
        return ready == 0 ? -EAGAIN : 0;
      }
      break;
    }
  }
  if (r < 0) {
    const int e = errno;
    return e == EWOULDBLOCK ? -EAGAIN : -static_cast<std::int64_t>(e);
  }
  return r;
}

bool is_stream(Handle fd) noexcept {
  int type = 0;
  socklen_t size = sizeof type;
  return ::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_TYPE, &type, &size) == 0 &&
         type == SOCK_STREAM && !is_listening(static_cast<int>(fd));
}

int peer_into(Handle fd, Address& address) noexcept {
  auto size = static_cast<socklen_t>(Address::capacity());
  if (::getpeername(static_cast<int>(fd), static_cast<sockaddr*>(address.native()), &size) != 0)
    return -errno;
  address.set_native_size(size);
  return 0;
}

int make_non_blocking(Handle handle) noexcept {
  const int fd = static_cast<int>(handle);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
  return 0;
}

#if defined(__APPLE__)
int set_socket_flags(int fd) noexcept {
  if (::fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return -errno;
  return make_non_blocking(Handle{fd});
}
#endif

void shut_down_for_close(Handle fd, bool call_in_flight) noexcept {
  int how = SHUT_RD;
  if (!call_in_flight) {
    linger l{};
    socklen_t size = sizeof l;
    const bool resets = ::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_LINGER, &l, &size) == 0 &&
                        l.l_onoff != 0 && l.l_linger == 0;
    if (!resets) how = SHUT_RDWR;
  }
  (void)::shutdown(static_cast<int>(fd), how);
}

}  // namespace arbor::io::posix
