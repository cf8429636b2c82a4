// The non-blocking system call behind each operation kind (Linux). Readiness engines call it
// first speculatively and then again on every readiness; io_uring uses it for speculative sends.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "descriptor.hpp"

namespace arbor::io {

static_assert(sizeof(ConstBuffer) == sizeof(iovec) && alignof(ConstBuffer) == alignof(iovec));

namespace {

std::int64_t error_result() noexcept {
  return -static_cast<std::int64_t>(errno);
}
constexpr int kSendFlags = MSG_NOSIGNAL | MSG_DONTWAIT;

std::int64_t connect_step(Operation& op, int fd) noexcept {
  if (op.stage == 0) {
    op.stage = 1;
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
  return error == 0 ? 0 : -static_cast<std::int64_t>(error);
}

}  // namespace

std::int64_t perform(Operation& op, Handle handle) noexcept {
  const int fd = static_cast<int>(handle);
  ssize_t r = -1;
  switch (op.kind) {
    case OpKind::receive:
      r = ::recv(fd, op.data, op.size, MSG_DONTWAIT);
      break;
    case OpKind::send:
      r = ::send(fd, op.data, op.size, kSendFlags);
      break;
    case OpKind::send_vectored: {
      msghdr m{};
      m.msg_iov = static_cast<iovec*>(op.data);
      m.msg_iovlen = op.size;
      r = ::sendmsg(fd, &m, kSendFlags);
      break;
    }
    case OpKind::accept: {
      socklen_t len = Address::capacity();
      sockaddr* addr = op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr;
      r = ::accept4(fd, addr, addr ? &len : nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      break;
    }
    case OpKind::connect:
      return connect_step(op, fd);
    case OpKind::receive_from: {
      socklen_t len = Address::capacity();
      r = ::recvfrom(fd, op.data, op.size, MSG_DONTWAIT,
                     op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr,
                     op.address ? &len : nullptr);
      break;
    }
    case OpKind::send_to:
      r = ::sendto(fd, op.data, op.size, kSendFlags,
                   static_cast<const sockaddr*>(op.address->native()), op.address->native_size());
      break;
  }
  if (r < 0) {
    const int e = errno;
    return e == EWOULDBLOCK ? -EAGAIN : -static_cast<std::int64_t>(e);
  }
  return r;
}

int make_non_blocking(Handle handle) noexcept {
  const int fd = static_cast<int>(handle);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
  return 0;
}

}  // namespace arbor::io
