// Echo server for perf/compare-echo: Boost.Asio written the way a competent Asio user would —
// one io_context per thread (threads = CPUs in the affinity mask, or argv[2]), the acceptor
// on the first, accepted sockets spread round-robin, async_read_some/async_write with a
// per-connection buffer (Asio recycles handler memory per thread). Prints "ready <port>".
#include <sched.h>

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// (keep the blank line: clang-format must not sort Boost above <utility>)

#include <boost/asio.hpp>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  explicit Session(tcp::socket socket) : socket_(std::move(socket)) {}
  void start() { read(); }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(buffer_),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (!ec) self->write(n);
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

int cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 2 ? std::atoi(argv[2]) : cpus();
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (int i = 0; i < threads; ++i)
    contexts.push_back(std::make_unique<asio::io_context>(1));
  const unsigned short port = argc > 1 ? static_cast<unsigned short>(std::atoi(argv[1])) : 0;
  tcp::acceptor acceptor(*contexts[0], tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  std::size_t next = 0;
  std::function<void()> accept = [&] {
    auto& ctx = *contexts[next++ % contexts.size()];
    acceptor.async_accept(ctx, [&](boost::system::error_code ec, tcp::socket socket) {
      if (!ec) {
        socket.set_option(tcp::no_delay(true));
        std::make_shared<Session>(std::move(socket))->start();
      }
      accept();
    });
  };
  accept();
  asio::signal_set signals(*contexts[0], SIGINT, SIGTERM);
  signals.async_wait([&](auto, int) {
    for (auto& c : contexts)
      c->stop();
  });
  std::printf("ready %u\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  std::vector<std::thread> pool;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (auto& c : contexts)
    guards.push_back(asio::make_work_guard(*c));
  for (int i = 1; i < threads; ++i)
    pool.emplace_back([&, i] { contexts[static_cast<std::size_t>(i)]->run(); });
  contexts[0]->run();
  for (auto& c : contexts)
    c->stop();
  for (auto& t : pool)
    t.join();
  return 0;
}
