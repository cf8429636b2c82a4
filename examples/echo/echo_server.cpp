// A TCP echo server: every byte a client sends comes back.
//
//   echo_server [HOST:PORT]        (default 127.0.0.1:7000; ARBOR_ENGINE picks the engine)
//
// Ctrl-C stops it: the runtime cancels the accept loop and every connection, then exits.
#include <cstdio>

#include "arbor/arbor.hpp"
#include "common/signal_thread.hpp"

namespace {

arbor::Task<> echo(arbor::TcpStream stream) {
  std::byte buffer[16 * 1024];
  for (;;) {
    auto n = co_await stream.read_some(buffer);
    if (!n || *n == 0) co_return;  // error or peer closed: either way, done
    if (!co_await stream.write_all({buffer, *n})) co_return;
  }
}

arbor::Task<int> serve(arbor::Runtime& rt, arbor::Address address) {
  auto listener = arbor::TcpListener::bind(rt, address);
  if (!listener) {
    std::fprintf(stderr, "echo: cannot listen on %s: %s\n", address.to_string().c_str(),
                 listener.error().message().c_str());
    co_return 1;
  }
  std::printf("echo: listening on %s\n", listener->local_address()->to_string().c_str());
  std::fflush(stdout);
  for (;;) {
    auto stream = co_await listener->accept();
    if (!stream) co_return stream.error() == std::errc::operation_canceled ? 0 : 1;
    stream->set_no_delay(true).value();
    rt.spawn(echo(std::move(*stream))).detach();
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto address = arbor::Address::parse(argc > 1 ? argv[1] : "127.0.0.1:7000");
  if (!address) {
    std::fprintf(stderr, "usage: echo_server [HOST:PORT]  (e.g. 127.0.0.1:7000, [::1]:7000)\n");
    return 2;
  }
  const auto signals = examples::block_stop_signals();  // before the runtime's threads
  arbor::Runtime rt;
  examples::SignalThread on_signal(signals, [&](int) { rt.request_stop(); });
  return rt.block_on(serve(rt, *address));
}
