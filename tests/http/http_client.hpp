// A blocking raw-socket HTTP/1.1 client on 127.0.0.1 for the server tests: send bytes, read
// whole responses (by Content-Length), see the server close.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

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
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{10, 0};  // a safety bound so a broken server fails the test instead of hanging it
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool send(const std::string& data) {
    std::size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
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

  /// True if the server closes the connection (EOF or reset) with nothing more to read.
  bool closed_by_server() {
    char c;
    ssize_t n;
    do {
      n = ::recv(fd_, &c, 1, 0);
    } while (n < 0 && errno == EINTR);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  bool fill() {
    char chunk[4096];
    ssize_t n;
    do {
      n = ::recv(fd_, chunk, sizeof chunk, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

}  // namespace arbor::http_test
