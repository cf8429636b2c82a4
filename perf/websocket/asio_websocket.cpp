// WebSocket echo for perf/compare-websocket: the same Beast echo as examples/websocket, on
// Boost.Asio's own io_context instead of arbor (one io_context, argv[2] threads running it,
// default 1). Prints "websocket: listening on 127.0.0.1:PORT" as the example does.
//
//   asio_websocket [HOST:PORT] [THREADS]
// clang-format off
// First: Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// clang-format on
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace net = boost::asio;
namespace websocket = boost::beast::websocket;
using net::ip::tcp;

net::awaitable<void> echo(tcp::socket socket) {
  socket.set_option(tcp::no_delay(true));
  websocket::stream<tcp::socket> ws(std::move(socket));
  ws.read_message_max(64 * 1024 * 1024);
  try {
    co_await ws.async_accept(net::use_awaitable);
    boost::beast::flat_buffer buffer;
    for (;;) {
      co_await ws.async_read(buffer, net::use_awaitable);
      ws.text(ws.got_text());
      co_await ws.async_write(buffer.data(), net::use_awaitable);
      buffer.consume(buffer.size());
    }
  } catch (const boost::system::system_error&) {  // closed, reset: the connection is over
  }
}

net::awaitable<void> serve(tcp::acceptor& acceptor) {
  for (;;) {
    auto socket = co_await acceptor.async_accept(net::use_awaitable);
    net::co_spawn(acceptor.get_executor(), echo(std::move(socket)), net::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string at = argc > 1 ? argv[1] : "127.0.0.1:7101";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const auto colon = at.rfind(':');
  net::io_context io(threads);
  tcp::acceptor acceptor(io, {net::ip::make_address(at.substr(0, colon)),
                              static_cast<unsigned short>(std::stoi(at.substr(colon + 1)))});
  std::printf("websocket: listening on %s:%u\n", at.substr(0, colon).c_str(),
              static_cast<unsigned>(acceptor.local_endpoint().port()));
  std::fflush(stdout);
  net::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](auto, int) { io.stop(); });
  net::co_spawn(io, serve(acceptor), net::detached);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : pool)
    t.join();
}
