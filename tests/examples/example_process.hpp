// End-to-end helpers for the example programs: start one as a child process on an ephemeral
// 127.0.0.1 port, talk to it with blocking raw sockets, stop it with a signal. Every wait has
// an upper bound (poll), so a broken program fails a test instead of hanging it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../child_process.hpp"

namespace arbor::example_test {

using namespace std::chrono_literals;
using Millis = std::chrono::milliseconds;

// Waits (at most `limit`) until `fd` has `events`; false on timeout.
inline bool wait_for(int fd, short events, Millis limit) {
  return test::ChildProcess::ready(fd, events, limit);
}

// A child process running an example (child_process.hpp).
using ExampleProcess = test::ChildProcess;

inline sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// How a connection ended, as its reader saw it.
enum class End { eof, reset, timeout, error };

// A blocking TCP socket on 127.0.0.1 whose reads are bounded by poll.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)), buffer_(std::move(o.buffer_)) {}
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(buffer_, o.buffer_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }

  /// Connects to 127.0.0.1:port; `receive_buffer` > 0 sets SO_RCVBUF first (a small window).
  static Socket connect(int port, int receive_buffer = 0) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (receive_buffer > 0)
      ::setsockopt(s.fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    const sockaddr_in a = loopback(port);
    if (::connect(s.fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return Socket();
    return s;
  }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  bool send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  bool shutdown_write() { return ::shutdown(fd_, SHUT_WR) == 0; }

  /// The next line (without its newline), or nullopt if the connection ended or nothing came
  /// within `limit` (last_end() says which).
  std::optional<std::string> read_line(Millis limit = 10s) {
    std::size_t nl;
    while ((nl = buffer_.find('\n')) == std::string::npos)
      if (!fill(limit)) return std::nullopt;
    std::string line = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    return line;
  }
  /// Exactly `n` bytes, or nullopt.
  std::optional<std::string> read_exact(std::size_t n, Millis limit = 10s) {
    while (buffer_.size() < n)
      if (!fill(limit)) return std::nullopt;
    std::string out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return out;
  }
  /// Reads (and keeps in `rest`, if given) until the connection ends; how it ended. Each read
  /// waits at most `limit`.
  End read_to_end(Millis limit = 10s, std::string* rest = nullptr) {
    while (fill(limit)) {
    }
    if (rest != nullptr) *rest = std::exchange(buffer_, {});
    buffer_.clear();
    return end_;
  }
  End last_end() const { return end_; }

 private:
  bool fill(Millis limit) {
    if (!wait_for(fd_, POLLIN, limit)) {
      end_ = End::timeout;
      return false;
    }
    char chunk[64 * 1024];
    ssize_t n;
    do {
      n = ::recv(fd_, chunk, sizeof chunk, 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      buffer_.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
    end_ = n == 0 ? End::eof : errno == ECONNRESET ? End::reset : End::error;
    return false;
  }
  int fd_ = -1;
  std::string buffer_;
  End end_ = End::timeout;
};

// A listening socket on 127.0.0.1, port 0 (the kernel picks one).
class Listener {
 public:
  Listener() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a = loopback(0);
    socklen_t length = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &length);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }
  /// The next connection within `limit`, or a socket that is not ok().
  Socket accept(Millis limit = 10s) {
    if (!wait_for(fd_, POLLIN, limit)) return Socket();
    return Socket(::accept(fd_, nullptr, nullptr));
  }

 private:
  int fd_;
  int port_ = 0;
};

// A 127.0.0.1 port with nobody listening: bound (so nobody else gets it for now), not listening.
class DeadPort {
 public:
  DeadPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a = loopback(0);
    socklen_t length = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &length);
    port_ = ntohs(a.sin_port);
  }
  ~DeadPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace arbor::example_test
