// Operations and timers the engine tests share: a one-byte receive and a timer that record
// how they completed and count a Countdown down; and a connected stream pair made the same way
// on every platform the tests run on (a Unix socket pair on POSIX, a loopback TCP connection on
// Windows, which has no socketpair), with the two calls the tests make on the peer's end.
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <thread>

#if defined(_WIN32)
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include "../sched/test_support.hpp"
#include "arbor/io/engine.hpp"

namespace arbor::io::test {

/// Two connected stream sockets: [0] for the engine, [1] the peer the test writes to and closes.
/// False if the system refused (the caller asserts).
inline bool stream_pair(Handle (&out)[2]) {
#if defined(_WIN32)
  WSADATA data;
  if (::WSAStartup(MAKEWORD(2, 2), &data) != 0) return false;  // counted; harmless when repeated
  // Blocking calls on the test's own listener: connect() returns once the handshake is done and
  // accept() then returns at once.
  const SOCKET listener = ::socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
  if (listener == INVALID_SOCKET) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int length = sizeof address;
  SOCKET client = INVALID_SOCKET, accepted = INVALID_SOCKET;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::listen(listener, 1) == 0 &&
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    client = ::socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (client != INVALID_SOCKET &&
        ::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0)
      accepted = ::accept(listener, nullptr, nullptr);
  }
  ::closesocket(listener);
  if (accepted == INVALID_SOCKET) {
    if (client != INVALID_SOCKET) ::closesocket(client);
    return false;
  }
  out[0] = static_cast<Handle>(accepted);
  out[1] = static_cast<Handle>(client);
  return true;
#else
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  out[0] = fds[0];
  out[1] = fds[1];
  return true;
#endif
}

#if !defined(_WIN32)
/// A connected loopback TCP pair (blocking sockets): [0] for the engine, [1] the peer. False if
/// the system refused (the caller asserts).
inline bool loopback_tcp_pair(Handle (&out)[2]) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int client = -1, accepted = -1;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::listen(listener, 1) == 0 &&
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (client >= 0 &&
        ::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0)
      accepted = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  }
  ::close(listener);
  if (accepted < 0) {
    if (client >= 0) ::close(client);
    return false;
  }
  out[0] = accepted;
  out[1] = client;
  return true;
}
#endif

/// Writes one byte on the peer's end; true if it was sent.
inline bool send_byte(Handle peer, char c) {
#if defined(_WIN32)
  return ::send(static_cast<SOCKET>(peer), &c, 1, 0) == 1;
#else
  return ::write(static_cast<int>(peer), &c, 1) == 1;
#endif
}

/// Closes the peer's end (never attached to an engine).
inline void close_peer(Handle peer) {
#if defined(_WIN32)
  ::closesocket(static_cast<SOCKET>(peer));
#else
  ::close(static_cast<int>(peer));
#endif
}

/// Sends one byte without waiting (nor raising SIGPIPE); true if it was sent. On Windows `h`
/// must be non-blocking already (an engine's attach() makes it so).
inline bool send_byte_now(Handle h, char c) {
#if defined(_WIN32)
  return ::send(static_cast<SOCKET>(h), &c, 1, 0) == 1;
#else
  return ::send(static_cast<int>(h), &c, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
#endif
}

/// Fills `h`'s send buffer (its peer reads nothing) until a send would wait; true if it sent
/// anything. On Windows `h` must be non-blocking already (an engine's attach() makes it so).
inline bool fill_send_buffer(Handle h) {
  static char chunk[64 * 1024];
  bool sent = false;
#if defined(_WIN32)
  while (::send(static_cast<SOCKET>(h), chunk, sizeof chunk, 0) > 0)
    sent = true;
#else
  while (::send(static_cast<int>(h), chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
    sent = true;
#endif
  return sent;
}

/// Fills the send buffers of `handles` (their peers read nothing), so a send on any of them must
/// wait. A loopback TCP connection (Windows) frees room again for a while after a send would
/// block (the peer's delayed acknowledgements), so there it fills again after a pause, until a
/// round sends nothing; a Unix socket pair is full at once.
inline void fill_send_buffers(std::span<const Handle> handles) {
  for (bool sent = true; sent;) {
    sent = false;
    for (Handle h : handles)
      sent |= fill_send_buffer(h);
#if defined(_WIN32)
    if (sent) std::this_thread::sleep_for(std::chrono::milliseconds(200));
#else
    break;
#endif
  }
}

/// Whether `r` is what a one-byte send pending on a full buffer may end with when its peer
/// closes: the peer's error. On Windows also 1, the byte sent: a loopback TCP pair (stream_pair)
/// frees send room after fill_send_buffers saw it full, as late acknowledgements arrive, so the
/// send may go out before the hang-up (9 of 200 in one wine run); a Unix socket pair stays full.
inline bool hang_up_send_result(std::int64_t r) {
#if defined(_WIN32)
  if (r == 1) return true;
#endif
  return r == -EPIPE || r == -ECONNRESET;
}

/// Reads whatever has arrived on the peer's end, without waiting for more.
inline void drain_peer(Handle peer) {
  static char sink[64 * 1024];
#if defined(_WIN32)
  const auto s = static_cast<SOCKET>(peer);
  u_long non_blocking = 1;
  ::ioctlsocket(s, FIONBIO, &non_blocking);
  while (::recv(s, sink, sizeof sink, 0) > 0) {
  }
  non_blocking = 0;
  ::ioctlsocket(s, FIONBIO, &non_blocking);
#else
  while (::recv(static_cast<int>(peer), sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
#endif
}

/// Sets `h`'s send buffer size (SO_SNDBUF).
inline void set_send_buffer(Handle h, int bytes) {
#if defined(_WIN32)
  ::setsockopt(static_cast<SOCKET>(h), SOL_SOCKET, SO_SNDBUF, reinterpret_cast<const char*>(&bytes),
               sizeof bytes);
#else
  ::setsockopt(static_cast<int>(h), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
#endif
}

/// setenv/unsetenv, which Windows' CRT spells _putenv_s (an empty value unsets there).
inline void set_env(const char* name, const char* value) {
#if defined(_WIN32)
  ::_putenv_s(name, value);
#else
  ::setenv(name, value, 1);
#endif
}
inline void unset_env(const char* name) {
#if defined(_WIN32)
  ::_putenv_s(name, "");
#else
  ::unsetenv(name);
#endif
}

struct Receive : Operation {
  std::byte byte{};
  std::atomic<int> completions{0};
  std::atomic<std::int64_t> last{0};
  sched::test::Countdown* done = nullptr;
  /// A one-byte receive on `d` that counts `counter` down when it completes.
  void prepare(DescriptorRef d, sched::test::Countdown& counter) noexcept {
    target(d);
    kind = OpKind::receive;
    data = &byte;
    size = 1;
    complete = &on_complete;
    done = &counter;
  }
  static void on_complete(Operation& op, std::int64_t result) noexcept {
    auto& self = static_cast<Receive&>(op);
    self.last = result;
    self.completions.fetch_add(1);
    self.done->count_down();
  }
};

struct Timed : Timer {
  std::atomic<int> fired{0};
  std::atomic<std::int64_t> result{1};
  std::atomic<std::int64_t> at{0};
  sched::test::Countdown* done = nullptr;
  /// Due at `deadline`; counts `fired_done` down when it fires.
  void set(sched::test::Countdown& fired_done, std::int64_t deadline) noexcept {
    done = &fired_done;
    handler = &on_event;
    deadline_ns = deadline;
  }
  static void on_event(const sched::Event& e, sched::Disposition) noexcept {
    auto* self = static_cast<Timed*>(static_cast<Timer*>(e.target));
    self->at = now_ns();
    self->result = e.result;
    self->fired.fetch_add(1);
    self->done->count_down();
  }
};

}  // namespace arbor::io::test
