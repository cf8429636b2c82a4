// Echo server for perf/compare-echo: arbor, engine from ARBOR_ENGINE, workers from
// ARBOR_WORKERS (default: the CPUs in the affinity mask). Prints "ready <port>" once listening
// and runs until SIGTERM/SIGINT. argv[2] (optional, perf/compare-ring-shapes): every 100th
// message a worker thread echoes burns that many µs of CPU first, an uneven request, as
// perf/baselines/asio_echo does.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "arbor/arbor.hpp"
#include "uneven_load.hpp"

namespace {

arbor::perf::UnevenLoad uneven{0};

arbor::Task<> echo(arbor::TcpStream stream) {
  std::byte buffer[4096];
  for (;;) {
    auto n = co_await stream.read_some(buffer);
    if (!n || *n == 0) co_return;
    uneven.on_message();
    if (!co_await stream.write_all({buffer, *n})) co_return;
  }
}

arbor::Task<int> serve(arbor::Runtime& rt, arbor::Address address) {
  auto listener = arbor::TcpListener::bind(rt, address);
  if (!listener) co_return 1;
  std::printf("ready %u\n", listener->local_address()->port());
  std::fflush(stdout);
  for (;;) {
    auto stream = co_await listener->accept();
    if (!stream) co_return 0;
    (void)stream->set_no_delay(true);
    rt.spawn(echo(std::move(*stream))).detach();
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto address = arbor::Address::parse(argc > 1 ? argv[1] : "127.0.0.1:0");
  if (!address) return 2;
  if (argc > 2) uneven = arbor::perf::UnevenLoad{std::atoi(argv[2])};
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  arbor::Runtime rt;
  std::thread([&rt, signals] {
    int s = 0;
    sigwait(&signals, &s);
    rt.request_stop();
  }).detach();
  return rt.block_on(serve(rt, *address));
}
