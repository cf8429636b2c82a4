// HTTP baseline for perf/http/compare: Boost.Asio written the way a competent Asio user would
// for the TechEmpower plaintext and JSON tests. One io_context per thread (threads = CPUs in
// the affinity mask, or argv[2]); the acceptor on the first, sockets spread round-robin. Per
// connection: async_read_some into a buffer, answer every complete request in it, and send the
// batch's responses with one async_write. The Date header is cached per thread and second;
// JSON comes from rapidjson's Writer, like arbor's. Prints "ready <port>".
//
// It does what the benchmark needs and no more: GET /plaintext and /json, keep-alive,
// pipelining, 404 for anything else. No limits, no timeouts, no body handling.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "asio_server.hpp"

namespace {

std::string_view date() {
  thread_local time_t second = -1;
  thread_local char text[64];
  thread_local std::size_t size = 0;
  timespec now{};
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  if (now.tv_sec != second) {
    second = now.tv_sec;
    tm parts{};
    gmtime_r(&second, &parts);
    size = std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &parts);
  }
  return {text, size};
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  explicit Session(tcp::socket socket) : socket_(std::move(socket)) {}
  void start() { read(); }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(in_ + used_, sizeof in_ - used_),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (!ec) self->handle(n);
        });
  }

  void handle(std::size_t n) {
    used_ += n;
    out_.clear();
    std::string_view data(in_, used_);
    std::size_t end;
    while ((end = data.find("\r\n\r\n")) != std::string_view::npos) {
      const std::string_view line = data.substr(0, data.find("\r\n"));
      const std::size_t sp = line.find(' ');
      const std::string_view path = line.substr(sp + 1, line.find(' ', sp + 1) - sp - 1);
      respond(path);
      data.remove_prefix(end + 4);
    }
    if (data.size() == sizeof in_) return;  // a head larger than the buffer: drop the client
    std::memmove(in_, data.data(), data.size());
    used_ = data.size();
    if (out_.empty()) return read();
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (!ec) self->read();
                      });
  }

  void respond(std::string_view path) {
    std::string_view type = "text/plain", body = "Hello, World!", status = "200 OK";
    // Reused per thread: no allocation per request once warm.
    thread_local rapidjson::StringBuffer json;
    thread_local rapidjson::Writer<rapidjson::StringBuffer> writer;
    if (path == "/json") {
      json.Clear();
      writer.Reset(json);
      writer.StartObject();
      writer.Key("message");
      writer.String("Hello, World!");
      writer.EndObject();
      type = "application/json";
      body = {json.GetString(), json.GetSize()};
    } else if (path != "/plaintext") {
      status = "404 Not Found";
      body = "Not Found";
    }
    char length[24];
    const int len = std::snprintf(length, sizeof length, "%zu", body.size());
    for (std::string_view part :
         {std::string_view("HTTP/1.1 "), status, std::string_view("\r\nServer: asio\r\nDate: "),
          date(), std::string_view("\r\nContent-Type: "), type,
          std::string_view("\r\nContent-Length: "),
          std::string_view(length, static_cast<std::size_t>(len)), std::string_view("\r\n\r\n"),
          body})
      out_.append(part);
  }

  tcp::socket socket_;
  char in_[16 * 1024];
  std::size_t used_ = 0;
  std::string out_;
};

}  // namespace

int main(int argc, char** argv) {
  return serve_per_thread<Session>(argc, argv);
}
