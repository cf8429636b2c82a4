// The HTTP example server (the TechEmpower plaintext and JSON tests, plus /metrics).
//
//   http_server [--listen 127.0.0.1:8080] [--workers N] [--engine auto|epoll|uring] ...
//
// SIGINT/SIGTERM/SIGQUIT (Windows: Ctrl-C, Ctrl-Break, the console closing): stop accepting,
// answer every request already received, exit 0 (bounded by --shutdown-timeout-ms). SIGHUP and
// SIGUSR1 (which a process manager or a log rotator may send, and which would otherwise kill the
// process) log a line and change nothing: there is no configuration to reload and no log file to
// reopen. SIGPIPE is ignored (the runtime does that). HTTPS with --tls-cert and --tls-key.
// Flags: --help; docs/http.md.
#include <csignal>
#include <cstdio>
#include <string>

#include "arbor/arbor.hpp"
#include "arbor/http/server.hpp"
#include "flags.hpp"
#include "routes.hpp"
#include "server_log.hpp"

namespace {

// What the process listens for: SIGINT, SIGTERM (Windows: Ctrl-C, Ctrl-Break, the console
// closing) and SIGQUIT drain; SIGHUP and SIGUSR1 are logged. Windows has only the first two.
#if defined(_WIN32)
constexpr int kSignals[] = {SIGINT, SIGTERM};
#else
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1};
#endif

// Until cancelled: each stop signal asks the server to drain (again on a second one: harmless,
// shutdown() is idempotent). A signal that came before the server existed waits in `signals`.
arbor::Task<> drain_on_signal(arbor::SignalListener& signals, arbor::http::Server& server) {
  for (;;) {
    auto signal = co_await signals.recv();
    if (!signal) co_return;  // cancelled: the server has stopped
#if !defined(_WIN32)
    if (*signal == SIGHUP || *signal == SIGUSR1) {
      arbor::example::server_log().info("http: {} ignored (nothing to reload or reopen)",
                                        *signal == SIGHUP ? "SIGHUP" : "SIGUSR1");
      continue;
    }
#endif
    server.shutdown();
  }
}

arbor::Task<int> serve(arbor::Runtime& rt, const arbor::example::Flags& flags,
                       arbor::SignalListener& signals) {
  arbor::example::Routes routes(rt);
  auto server = arbor::http::Server::bind(rt, flags.server, std::ref(routes));
  if (!server) {
    arbor::example::server_log().error("http: cannot listen on {}: {}",
                                       flags.server.listen.to_string(), server.error().message());
    co_return 1;
  }
  routes.attach(**server);
  const std::string address = (*server)->local_address().to_string();
  arbor::example::server_log().info("http: engine {}, {} workers, listening on {}://{}",
                                    rt.engine().name(), rt.scheduler().workers(),
                                    flags.server.tls ? "https" : "http", address);
  std::printf("listening on %s\n", address.c_str());
  std::fflush(stdout);
  auto on_signal = rt.spawn_abortable(drain_on_signal(signals, **server));
  co_await (*server)->run(flags.shutdown_timeout);
  on_signal.abort();  // before the server goes
  co_await std::move(on_signal);
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = arbor::example::parse_flags({argv + 1, argv + argc});
  if (const auto* message = std::get_if<std::string>(&parsed)) {
    std::fprintf(stderr, "http_server: %s\n", message->c_str());
    return 2;
  }
  const auto& flags = std::get<arbor::example::Flags>(parsed);
  if (flags.help) {
    std::fputs(arbor::example::usage(), stdout);
    return 0;
  }
  auto rt = arbor::Runtime::create(flags.runtime);
  if (!rt) {
    std::fprintf(stderr, "http_server: cannot start the runtime: %s\n",
                 rt.error().message().c_str());
    return 2;
  }
  // Listened for from here on, before the server exists: a signal meanwhile waits in the
  // listener instead of ending the process. It goes after the runtime's shutdown, so on Windows
  // a console close lets the process end only once the drain is done.
  auto signals = arbor::SignalListener::listen(**rt, kSignals);
  if (!signals) {
    std::fprintf(stderr, "http_server: cannot listen for signals: %s\n",
                 signals.error().message().c_str());
    return 2;
  }
  const int status = (*rt)->block_on(serve(**rt, flags, *signals));
  (*rt)->shutdown();
  return status;
}
