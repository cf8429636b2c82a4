// A WebSocket echo server: Beast's websocket::stream over arbor::asio::Stream, one arbor task
// per connection, no io_context (docs/guide.md, "Bringing Asio code along"). Every message
// comes back as it came, text or binary.
//
//   websocket_server [HOST:PORT]   (default 127.0.0.1:7100; ARBOR_ENGINE picks the engine)
//
// Ctrl-C stops it: the runtime cancels the accept loop and every connection, then exits.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <csignal>
#include <cstdio>

#include "arbor/arbor.hpp"
#include "arbor/asio/asio.hpp"

namespace {

namespace websocket = boost::beast::websocket;
using arbor::asio::use_task;

arbor::Task<> echo(arbor::asio::Context& ctx, arbor::TcpStream tcp) {
  tcp.set_no_delay(true).value();
  websocket::stream<arbor::asio::Stream> ws(arbor::asio::Stream(ctx, std::move(tcp)));
  ws.read_message_max(64 * 1024 * 1024);
  auto accepted = co_await ws.async_accept(use_task);
  if (!accepted) co_return;
  boost::beast::flat_buffer buffer;
  for (;;) {
    auto n = co_await ws.async_read(buffer, use_task);
    if (!n) co_return;  // closed by the peer, or cancelled: either way, done
    ws.text(ws.got_text());
    auto written = co_await ws.async_write(buffer.data(), use_task);
    if (!written) co_return;
    buffer.consume(buffer.size());
  }
}

arbor::Task<int> serve(arbor::Runtime& rt, arbor::asio::Context& ctx, arbor::Address address) {
  auto listener = arbor::TcpListener::bind(rt, address);
  if (!listener) {
    std::fprintf(stderr, "websocket: cannot listen on %s: %s\n", address.to_string().c_str(),
                 listener.error().message().c_str());
    co_return 1;
  }
  std::printf("websocket: listening on %s\n", listener->local_address()->to_string().c_str());
  std::fflush(stdout);
  for (;;) {
    auto stream = co_await listener->accept();
    if (!stream) co_return stream.error() == std::errc::operation_canceled ? 0 : 1;
    rt.spawn(echo(ctx, std::move(*stream))).detach();
  }
}

arbor::Task<> stop_on_signal(arbor::Runtime& rt, arbor::SignalListener& signals) {
  auto signal = co_await signals.recv();  // into a variable: GCC 12 (docs/guide.md, case 4)
  if (signal) rt.request_stop();
}

}  // namespace

int main(int argc, char** argv) {
  auto address = arbor::Address::parse(argc > 1 ? argv[1] : "127.0.0.1:7100");
  if (!address) {
    std::fprintf(stderr, "usage: websocket_server [HOST:PORT]  (e.g. 127.0.0.1:7100)\n");
    return 2;
  }
  arbor::Runtime rt;
  auto signals = arbor::signal(rt, {SIGINT, SIGTERM});
  if (!signals) {
    std::fprintf(stderr, "websocket: cannot listen for signals: %s\n",
                 signals.error().message().c_str());
    return 1;
  }
  int status = 0;
  {
    arbor::asio::Context ctx(rt);  // destroyed before the runtime: its services go first
    rt.spawn(stop_on_signal(rt, *signals)).detach();
    status = rt.block_on(serve(rt, ctx, *address));
    rt.shutdown();  // every connection's task has ended before the context goes
  }
  return status;
}
