// A TCP proxy: each client's connection is relayed to the upstream server, both ways at once.
//
//   tcp_proxy LISTEN_HOST:PORT UPSTREAM_HOST:PORT [--idle-timeout SECONDS]   (default 300)
//
// Half-close passes through: when one side ends its stream (FIN), the proxy ends the other's
// write side and relays the other direction until it ends too. No bytes either way for the
// idle timeout closes both connections. A client whose upstream cannot be reached is reset
// (RST), and so is the other side when one resets. Ctrl-C (SIGINT/SIGTERM) stops the proxy.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "arbor/arbor.hpp"

namespace {

using namespace std::chrono_literals;

// One direction until `from` ends its stream, whose end then goes on to `to`. Every transfer
// notifies `activity`. False on an error (a reset, say) or when cancelled.
arbor::Task<bool> pump(arbor::TcpStream& from, arbor::TcpStream& to, arbor::Notify& activity) {
  std::byte buffer[16 * 1024];
  for (;;) {
    auto n = co_await from.read_some(buffer);
    if (!n) co_return false;
    if (*n == 0) co_return to.shutdown_write().has_value();  // half-close: pass the FIN on
    if (!co_await to.write_all({buffer, *n})) co_return false;
    activity.notify_one();
  }
}

// Both directions in a task group; the first to fail cancels the other. True if both ended.
arbor::Task<bool> relay(arbor::TcpStream& client, arbor::TcpStream& upstream,
                        arbor::Notify& activity) {
  co_return co_await arbor::task_group<bool>(
      [&](arbor::TaskGroup<bool>& both) -> arbor::Task<bool> {
        both.spawn(pump(client, upstream, activity));
        both.spawn(pump(upstream, client, activity));
        bool ok = true;
        while (auto r = co_await both.next())  // each direction's result, as it ends
          if (!*r && std::exchange(ok, false)) both.cancel();
        co_return ok;
      });
}

// Returns once `activity` has been quiet for `limit` (or when cancelled).
// (Not `while (co_await ...) {}`: GCC 12 miscompiles that empty loop, which then never ends.)
arbor::Task<> idle(arbor::Notify& activity, std::chrono::seconds limit) {
  for (;;) {
    auto notified = co_await arbor::with_timeout(limit, activity.notified());
    if (!notified) co_return;  // timed_out, or operation_canceled
  }
}

arbor::Task<> proxy(arbor::Runtime& rt, arbor::TcpStream client, arbor::Address upstream_address,
                    std::chrono::seconds idle_limit) {
  auto upstream = co_await arbor::TcpStream::connect(rt, upstream_address, 10s);
  if (!upstream) {  // refused, unreachable, too slow: the client sees a reset
    (void)client.set_linger_reset();
    co_return;  // the destructor closes it
  }
  (void)client.set_no_delay(true);
  (void)upstream->set_no_delay(true);
  arbor::Notify activity;
  auto first =
      co_await arbor::when_any(relay(client, *upstream, activity), idle(activity, idle_limit));
  if (first.index() == 0 && !std::get<0>(first)) {  // one side failed: reset both
    (void)client.set_linger_reset();
    (void)upstream->set_linger_reset();
  }
}  // closes both (after an idle timeout: an orderly close)

arbor::Task<int> serve(arbor::Runtime& rt, arbor::Address address, arbor::Address upstream,
                       std::chrono::seconds idle_limit) {
  auto listener = arbor::TcpListener::bind(rt, address);
  if (!listener) {
    std::fprintf(stderr, "proxy: cannot listen on %s: %s\n", address.to_string().c_str(),
                 listener.error().message().c_str());
    co_return 1;
  }
  std::printf("proxy: listening on %s\n", listener->local_address()->to_string().c_str());
  std::fflush(stdout);
  for (;;) {
    auto client = co_await listener->accept();
    if (!client) co_return client.error() == std::errc::operation_canceled ? 0 : 1;
    rt.spawn(proxy(rt, std::move(*client), upstream, idle_limit)).detach();
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
  auto listen = arbor::Address::parse(argc > 1 ? argv[1] : "");
  auto upstream = arbor::Address::parse(argc > 2 ? argv[2] : "");
  long idle_seconds = 300;
  if (argc == 5 && std::strcmp(argv[3], "--idle-timeout") == 0) idle_seconds = std::atol(argv[4]);
  if (!listen || !upstream || (argc != 3 && argc != 5) || idle_seconds <= 0) {
    std::fprintf(stderr,
                 "usage: tcp_proxy LISTEN_HOST:PORT UPSTREAM_HOST:PORT [--idle-timeout SECONDS]\n");
    return 2;
  }
  arbor::Runtime rt;
  auto signals = arbor::signal(rt, {SIGINT, SIGTERM});  // from now on: an early one is kept
  if (!signals) {
    std::fprintf(stderr, "tcp_proxy: cannot listen for signals: %s\n",
                 signals.error().message().c_str());
    return 1;
  }
  rt.spawn(stop_on_signal(rt, *signals)).detach();
  const int status = rt.block_on(serve(rt, *listen, *upstream, std::chrono::seconds(idle_seconds)));
  rt.shutdown();  // every task has ended, stop_on_signal too, before its listener goes
  return status;
}
