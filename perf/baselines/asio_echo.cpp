// Echo server for perf/compare-echo: Boost.Asio written the way a competent Asio user would —
// one io_context per thread (threads = CPUs in the affinity mask, or argv[2]), the acceptor
// on the first, accepted sockets spread round-robin, async_read_some/async_write with a
// per-connection buffer (Asio recycles handler memory per thread). Prints "ready <port>".
// argv[3] (optional, perf/compare-ring-shapes): every 100th message a thread echoes burns that
// many µs of CPU first, an uneven request.
#include <cstdlib>
#include <memory>
#include <utility>

#include "../echo/uneven_load.hpp"
#include "asio_server.hpp"

namespace {

arbor::perf::UnevenLoad uneven{0};

class Session : public std::enable_shared_from_this<Session> {
 public:
  explicit Session(tcp::socket socket) : socket_(std::move(socket)) {}
  void start() { read(); }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(buffer_),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (ec) return;
          uneven.on_message();
          self->write(n);
        });
  }
  void write(std::size_t n) {
    asio::async_write(socket_, asio::buffer(buffer_, n),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (!ec) self->read();
                      });
  }
  tcp::socket socket_;
  char buffer_[4096];
};

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3) uneven = arbor::perf::UnevenLoad{std::atoi(argv[3])};
  return serve_per_thread<Session>(argc, argv);
}
