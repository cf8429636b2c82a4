// The HTTP example server (the TechEmpower plaintext and JSON tests, plus /metrics).
//
//   http_server [--listen 127.0.0.1:8080] [--workers N] [--engine auto|epoll|uring] ...
//
// SIGINT/SIGTERM/SIGQUIT (Windows: Ctrl-C, Ctrl-Break, the console closing): stop accepting,
// answer every request already received, exit 0 (bounded by --shutdown-timeout-ms). SIGHUP and
// SIGUSR1 (which a process manager or a log rotator may send, and which would otherwise kill the
// process) log a line and change nothing: there is no configuration to reload and no log file to
// reopen. SIGPIPE is ignored (the runtime does that). Flags: --help; docs/http.md.
#include <csignal>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "arbor/arbor.hpp"
#include "arbor/http/server.hpp"
#include "flags.hpp"
#include "routes.hpp"
#include "server_log.hpp"
#if defined(_WIN32)
#include "common/signal_thread.hpp"
#endif

namespace {

// Where the signal thread finds the server. A signal before the server exists is remembered.
struct ShutdownSwitch {
  std::mutex mutex;
  arbor::http::Server* server = nullptr;
  bool requested = false;

  void request() {
    std::lock_guard lock(mutex);
    requested = true;
    if (server != nullptr) server->shutdown();
  }
  void publish(arbor::http::Server* s) {
    std::lock_guard lock(mutex);
    server = s;
    if (s != nullptr && requested) s->shutdown();
  }
};

arbor::Task<int> serve(arbor::Runtime& rt, const arbor::example::Flags& flags,
                       ShutdownSwitch& shutdown) {
  arbor::example::Routes routes(rt);
  auto server = arbor::http::Server::bind(rt, flags.server, std::ref(routes));
  if (!server) {
    arbor::example::server_log().error("http: cannot listen on {}: {}",
                                       flags.server.listen.to_string(), server.error().message());
    co_return 1;
  }
  routes.attach(**server);
  const std::string address = (*server)->local_address().to_string();
  arbor::example::server_log().info("http: engine {}, {} workers, listening on http://{}",
                                    rt.engine().name(), rt.scheduler().workers(), address);
  std::printf("listening on %s\n", address.c_str());
  std::fflush(stdout);
  shutdown.publish(server->get());
  co_await (*server)->run(flags.shutdown_timeout);
  shutdown.publish(nullptr);  // before the server goes away
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
#if defined(_WIN32)
  // Ctrl-C, Ctrl-Break or the console closing: the console control handler (signal_thread.hpp)
  // asks the server to stop, as SIGINT does on POSIX. Registered before the runtime starts, so
  // that a Ctrl-C meanwhile is remembered (as the POSIX branch's blocked signals are) instead of
  // reaching the default handler, which ends the process; it goes after the runtime.
  static ShutdownSwitch shutdown;
  examples::SignalThread on_signal(examples::block_stop_signals(), [](int) { shutdown.request(); });
  auto rt = arbor::Runtime::create(flags.runtime);
  if (!rt) {
    std::fprintf(stderr, "http_server: cannot start the runtime: %s\n",
                 rt.error().message().c_str());
    return 2;
  }
  return (*rt)->block_on(serve(**rt, flags, shutdown));
#else
  // The signals are taken by a plain thread with sigwait (not a signal handler), so what they
  // do may lock and log. Blocked before the runtime starts its threads, which inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGUSR1})
    sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto rt = arbor::Runtime::create(flags.runtime);
  if (!rt) {
    std::fprintf(stderr, "http_server: cannot start the runtime: %s\n",
                 rt.error().message().c_str());
    return 2;
  }
  static ShutdownSwitch shutdown;  // outlives the detached signal thread
  std::thread([signals] {
    for (;;) {
      int signal = 0;
      if (sigwait(&signals, &signal) != 0) continue;
      if (signal == SIGHUP || signal == SIGUSR1) {
        arbor::example::server_log().info("http: {} ignored (nothing to reload or reopen)",
                                          signal == SIGHUP ? "SIGHUP" : "SIGUSR1");
        continue;
      }
      shutdown.request();  // again on a second signal: harmless, shutdown() is idempotent
    }
  }).detach();
  return (*rt)->block_on(serve(**rt, flags, shutdown));
#endif
}
