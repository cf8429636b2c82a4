// A blocking raw-socket HTTP/1.1 client on 127.0.0.1 for the server tests: send bytes, read
// whole responses (by Content-Length), see the server close.
// Winsock on Windows (the in-process suites run there on the IOCP engine, under wine in CI).
#pragma once

#if defined(_WIN32)
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>

namespace arbor::http_test {

struct Response {
  int status = 0;
  std::string head;  // status line and fields, without the final CRLF CRLF
  std::string body;
  std::string field(const std::string& name) const {
    const auto at = head.find("\r\n" + name + ": ");
    if (at == std::string::npos) return {};
    const auto from = at + 4 + name.size();
    return head.substr(from, head.find("\r\n", from) - from);
  }
};

class Client {
 public:
#if defined(_WIN32)
  using Socket = SOCKET;
  static constexpr Socket kNone = INVALID_SOCKET;
#else
  using Socket = int;
  static constexpr Socket kNone = -1;
#endif

  /// Connects to 127.0.0.1:port; from `source` (another loopback address, "127.0.0.2" say: a
  /// second peer as the server sees it) if given; with a receive buffer of `receive_buffer`
  /// bytes if not 0 (a client that stops reading: send_until_the_server_stops_reading()).
  explicit Client(int port, const char* source = nullptr, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ == kNone) return;
    // Before connect(): the window the server may fill is announced in the handshake. Shrunk
    // after it, the buffer held less than the window already announced, the kernel dropped the
    // server's segments that overflowed it, and with them the acknowledgements they carried:
    // this side's sends then stalled behind retransmission backoff (seconds) while the server,
    // all input read and all replies in its kernel buffer, rightly waited idle
    // (HttpServer.Issue32_AClientThatStopsReadingIsCutByTheWriteTimeout failed 5 in 80 runs).
    if (receive_buffer > 0)
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, reinterpret_cast<const char*>(&receive_buffer),
                   sizeof receive_buffer);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      if (::inet_pton(AF_INET, source, &from.sin_addr) != 1 ||
          ::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0)
        return;
    }
    // A safety bound so a broken server fails the test instead of hanging it.
#if defined(_WIN32)
    const DWORD ms = 10'000;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, reinterpret_cast<const char*>(&ms), sizeof ms);
#else
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
#endif
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, reinterpret_cast<const char*>(&one), sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() {
    if (fd_ == kNone) return;
#if defined(_WIN32)
    ::closesocket(fd_);
#else
    ::close(fd_);
#endif
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  bool connected() const {
    return connected_;
  }
  Socket fd() const {
    return fd_;
  }

  bool send(const std::string& data) {
    std::size_t off = 0;
    while (off < data.size()) {
      const long n = send_some(data.data() + off, data.size() - off);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// The next response, or status 0 if the connection ended (or timed out) first.
  Response read_response() {
    Response r;
    std::size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return r;
    r.head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    if (r.head.rfind("HTTP/1.1 ", 0) == 0) r.status = std::stoi(r.head.substr(9, 3));
    const std::string length = r.field("Content-Length");
    const std::size_t n = length.empty() ? 0 : std::stoul(length);
    while (buffer_.size() < n)
      if (!fill()) return Response{};
    r.body = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return r;
  }

  /// Everything the server sends until it closes (or the safety bound passes).
  std::string read_all() {
    while (fill()) {
    }
    return std::exchange(buffer_, {});
  }

  /// Half-closes: the server reads the end of the stream; this side can still read.
  bool shut_write() {
#if defined(_WIN32)
    return ::shutdown(fd_, SD_SEND) == 0;
#else
    return ::shutdown(fd_, SHUT_WR) == 0;
#endif
  }
  /// Closes with a reset (SO_LINGER 0) instead of an orderly end; the client is closed after.
  bool reset_connection() {
    linger l{1, 0};
    const bool set =
        ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, reinterpret_cast<const char*>(&l), sizeof l) == 0;
#if defined(_WIN32)
    ::closesocket(fd_);
#else
    ::close(fd_);
#endif
    fd_ = kNone;
    return set;
  }

  /// The receive buffer of a client that stops reading (the constructor's `receive_buffer`).
  static constexpr int kSmallReceiveBuffer = 4096;
  /// A client that stops reading (made with kSmallReceiveBuffer): sends `unit` over and over
  /// without blocking until the server stops taking it (its replies fill both buffers, so it
  /// waits in a write and reads no more) or `max_bytes` went. Returns the bytes sent; the
  /// socket stays non-blocking.
  std::size_t send_until_the_server_stops_reading(const std::string& unit, std::size_t max_bytes) {
#if defined(_WIN32)
    u_long on = 1;
    ::ioctlsocket(fd_, FIONBIO, &on);
#else
    const int flags = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
#endif
    std::size_t sent = 0, at = 0;
    int would_block = 0;
    // Would-block must repeat: the server drains its receive buffer in bursts between writes.
    while (sent < max_bytes && would_block < 200) {
      const long n = send_some(unit.data() + at, unit.size() - at);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        at = (at + static_cast<std::size_t>(n)) % unit.size();
        would_block = 0;
        continue;
      }
#if defined(_WIN32)
      if (::WSAGetLastError() != WSAEWOULDBLOCK) break;
      ::Sleep(5);
#else
      if (errno != EAGAIN && errno != EWOULDBLOCK) break;
      ::usleep(5000);
#endif
      ++would_block;
    }
    return sent;
  }

  /// True if the server closes the connection (EOF or reset) with nothing more to read.
  bool closed_by_server() {
    char c;
    const long n = receive_some(&c, 1);
    return n == 0 || (n < 0 && reset());
  }

 private:
  bool fill() {
    char chunk[4096];
    const long n = receive_some(chunk, sizeof chunk);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
  // One send or receive, retried on EINTR: bytes moved, or -1.
  long send_some(const char* data, std::size_t size) {
#if defined(_WIN32)
    return ::send(fd_, data, static_cast<int>(size), 0);
#else
    long n;
    do {
      n = ::send(fd_, data, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
#endif
  }
  long receive_some(char* data, std::size_t size) {
#if defined(_WIN32)
    return ::recv(fd_, data, static_cast<int>(size), 0);
#else
    long n;
    do {
      n = ::recv(fd_, data, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
#endif
  }
  static bool reset() {
#if defined(_WIN32)
    return ::WSAGetLastError() == WSAECONNRESET;
#else
    return errno == ECONNRESET;
#endif
  }

  Socket fd_ = kNone;
  bool connected_ = false;
  std::string buffer_;
};

}  // namespace arbor::http_test
