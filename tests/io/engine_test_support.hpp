// Operations and timers the engine tests share: a one-byte receive and a timer that record
// how they completed and count a Countdown down; and a connected stream pair made the same way
// on every platform the tests run on (a Unix socket pair on POSIX, a loopback TCP connection on
// Windows, which has no socketpair), with the two calls the tests make on the peer's end.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(_WIN32)
#include <winsock2.h>
#include <ws2tcpip.h>
#else
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
  static void on_event(const sched::Event& e, sched::Disposition) noexcept {
    auto* self = static_cast<Timed*>(static_cast<Timer*>(e.target));
    self->at = now_ns();
    self->result = e.result;
    self->fired.fetch_add(1);
    self->done->count_down();
  }
};

}  // namespace arbor::io::test
