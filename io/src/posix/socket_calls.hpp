// The POSIX socket calls the readiness and completion engines share, behind small functions,
// so the engine files hold engine logic and the platform spelling lives here (posix/).
//
// Every function is non-blocking and reports failure as -errno (never throws, never sets
// anything but errno).
#pragma once

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>

#include "arbor/io/operation.hpp"

namespace arbor::io::posix {

/// Flags for every send: a closed peer is an EPIPE error, not a process-killing SIGPIPE.
/// (macOS has MSG_NOSIGNAL from macOS 11 on, the oldest arbor builds for.)
inline constexpr int kSendFlags = MSG_NOSIGNAL;
#if defined(__APPLE__)
/// macOS has no SOCK_NONBLOCK, SOCK_CLOEXEC or accept4(): a socket it opens or accepts is made
/// non-blocking and closed on exec here, after the call that made it. Not atomic: another
/// thread's fork() and exec() in between would inherit the descriptor (as in any macOS program
/// that opens sockets while another thread execs). 0 or -errno; the caller closes `fd` then.
int set_socket_flags(int fd) noexcept;
#else
/// Flags for every accepted socket: non-blocking, closed on exec.
inline constexpr int kAcceptFlags = SOCK_NONBLOCK | SOCK_CLOEXEC;
#endif

/// Flags for every datagram receive (receive_from): the result is the datagram's whole length,
/// even when the buffer took only part of it.
inline constexpr int kDatagramReceiveFlags = MSG_TRUNC;

/// A datagram receive's result as the operation reports it: a datagram longer than the buffer
/// (`received`, with kDatagramReceiveFlags, is its whole length) is -EMSGSIZE, not the silent
/// prefix recv(2) would give; the kernel has already discarded it.
inline std::int64_t truncated_datagram(const Operation& op, std::int64_t received) noexcept {
  return received > static_cast<std::int64_t>(op.size) ? -EMSGSIZE : received;
}

/// Makes `fd` non-blocking; 0 or -errno.
int make_non_blocking(Handle fd) noexcept;

/// Runs op's system call once without blocking: >= 0 or -errno (-EAGAIN: would block). For
/// every kind but connect, which has progress of its own (connect_step).
std::int64_t perform(Operation& op, Handle fd) noexcept;

/// One step of a non-blocking connect: the first call (started == false) issues connect(2)
/// and sets `started`; later calls, after writability, report how it ended. -EAGAIN: not yet.
std::int64_t connect_step(const Operation& op, Handle fd, bool& started) noexcept;

/// For an engine's close() that cannot close `fd` yet (common/descriptor.hpp, "close means
/// closed"): ends the socket in the kernel now. The read side always (a listener stops
/// listening, pending reads end); the write side too (a stream's peer sees the end) unless a
/// call is in flight on it (`call_in_flight`: a send there finishes as it would have) or the
/// socket is set to close with a reset (SO_LINGER 0, which a FIN first would turn into an
/// orderly end). The caller keeps owning `fd` and closes it later. Errors are ignored: an
/// unconnected datagram socket reports ENOTCONN but is shut down all the same.
void shut_down_for_close(Handle fd, bool call_in_flight) noexcept;

/// Whether `fd` is a stream (SOCK_STREAM) socket that is not listening: one whose bytes a
/// receive takes (a listener's readable() waits for a connection, not bytes).
bool is_stream(Handle fd) noexcept;

/// The peer address of a freshly accepted `fd`, written to `address`: 0 or -errno.
int peer_into(Handle fd, Address& address) noexcept;

}  // namespace arbor::io::posix
