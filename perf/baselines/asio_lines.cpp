// perf/lines on Boost.Asio: the same driver (lines_common.hpp), one io_context on one thread,
// lines read with async_read_until into a dynamic_buffer over a std::string whose capacity
// stays 8 KiB (as arbor's buffer), the consumed line erased after each, the way Asio's
// examples read lines. Three modes: "coro" (C++20 coroutines, use_awaitable: arbor's shape),
// "streambuf" (the same into an asio::streambuf, whose consume() moves no bytes) and
// "callback" (a completion handler per line, which Asio recycles per thread). Asio completes
// every read_until through the io_context's queue, even when the line is already buffered.
//
//   perf/asio_lines [coro|streambuf|callback] [LINES] [LINE_BYTES]
// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// (keep the blank line: clang-format must not sort Boost above <utility>)

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <string>

#include "../lines_common.hpp"

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::size_t kBufferBytes = 8 * 1024;

asio::awaitable<bool> coro(tcp::socket& socket, lines::Meter& meter) {
  std::string data;
  data.reserve(kBufferBytes);
  for (;;) {
    boost::system::error_code ec;
    const std::size_t n =
        co_await asio::async_read_until(socket, asio::dynamic_buffer(data, kBufferBytes), '\n',
                                        asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return ec == asio::error::eof&& data.empty();
    meter.line(n - 1);
    data.erase(0, n);
  }
}

// The same on an asio::streambuf (sized like the others), whose consume() moves a pointer
// where the string's erases (moves the rest of the buffer down, on every line).
asio::awaitable<bool> coro_streambuf(tcp::socket& socket, lines::Meter& meter) {
  asio::streambuf buffer(kBufferBytes);
  for (;;) {
    boost::system::error_code ec;
    const std::size_t n = co_await asio::async_read_until(
        socket, buffer, '\n', asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return ec == asio::error::eof&& buffer.size() == 0;
    meter.line(n - 1);
    buffer.consume(n);
  }
}

struct CallbackReader {
  tcp::socket& socket;
  lines::Meter& meter;
  std::string data;
  bool ok = false;
  void next() {
    asio::async_read_until(socket, asio::dynamic_buffer(data, kBufferBytes), '\n',
                           [this](boost::system::error_code ec, std::size_t n) {
                             if (ec) {
                               ok = ec == asio::error::eof && data.empty();
                               return;
                             }
                             meter.line(n - 1);
                             data.erase(0, n);
                             next();
                           });
  }
};

}  // namespace

int main(int argc, char** argv) {
  const lines::Config config = lines::parse(argc, argv, "coro");
  if (config.mode != "coro" && config.mode != "streambuf" && config.mode != "callback") {
    std::fprintf(stderr, "mode: coro, streambuf or callback\n");
    return 2;
  }
  asio::io_context io(1);
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  lines::Feeder feeder(config, acceptor.local_endpoint().port());
  tcp::socket socket = acceptor.accept();
  lines::Meter meter(config);
  bool ok = false;
  meter.start();
  if (config.mode == "coro") {
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { ok = co_await coro(socket, meter); }, asio::detached);
    io.run();
  } else if (config.mode == "streambuf") {
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { ok = co_await coro_streambuf(socket, meter); },
        asio::detached);
    io.run();
  } else {
    CallbackReader reader{socket, meter, {}};
    reader.data.reserve(kBufferBytes);
    reader.next();
    io.run();
    ok = reader.ok;
  }
  return ok && meter.report("asio ") ? 0 : 1;
}
