// A TCP echo server: every byte a client sends comes back.
//
//   echo_server [HOST:PORT]        (default 127.0.0.1:7000; ARBOR_ENGINE picks the engine)
//
// Ctrl-C stops it: the runtime cancels the accept loop and every connection, then exits.
#include <csignal>
#include <cstdio>

#include "arbor/arbor.hpp"

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

// The first Ctrl-C or SIGTERM (Windows: Ctrl-C, Ctrl-Break, the console closing) stops the
// runtime, which cancels every task.
arbor::Task<> stop_on_signal(arbor::Runtime& rt, arbor::SignalListener& signals) {
  // Into a variable, not awaited in the `if`: GCC 12 skips such a body (docs/guide.md, case 4).
  auto signal = co_await signals.recv();
  if (signal) rt.request_stop();
}

}  // namespace

int main(int argc, char** argv) {
  auto address = arbor::Address::parse(argc > 1 ? argv[1] : "127.0.0.1:7000");
  if (!address) {
    std::fprintf(stderr, "usage: echo_server [HOST:PORT]  (e.g. 127.0.0.1:7000, [::1]:7000)\n");
    return 2;
  }
  arbor::Runtime rt;
  auto signals = arbor::signal(rt, {SIGINT, SIGTERM});  // from now on: an early one is kept
  if (!signals) {
    std::fprintf(stderr, "echo: cannot listen for signals: %s\n",
                 signals.error().message().c_str());
    return 1;
  }
  rt.spawn(stop_on_signal(rt, *signals)).detach();
  const int status = rt.block_on(serve(rt, *address));
  rt.shutdown();  // every task has ended, stop_on_signal too, before its listener goes
  return status;
}
