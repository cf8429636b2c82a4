// The HTTP example server (the TechEmpower plaintext and JSON tests, plus /metrics).
//
//   http_server [--listen 127.0.0.1:8080] [--workers N] [--engine auto|epoll|uring] ...
//
// SIGINT/SIGTERM: stop accepting, answer every request already received, exit 0 (bounded by
// --shutdown-timeout-ms). Flags: --help; docs/http.md.
#include <csignal>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "arbor/arbor.hpp"
#include "arbor/http/server.hpp"
#include "arbor/io/log.hpp"
#include "flags.hpp"
#include "routes.hpp"

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
    arbor::io::log::error("http: cannot listen on {}: {}", flags.server.listen.to_string(),
                          server.error().message());
    co_return 1;
  }
  routes.attach(**server);
  const std::string address = (*server)->local_address().to_string();
  arbor::io::log::info("http: engine {}, {} workers, listening on http://{}", rt.engine().name(),
                       rt.scheduler().workers(), address);
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
  // SIGINT/SIGTERM become a graceful shutdown, from a plain thread (not a signal handler).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before the runtime starts its threads

  auto rt = arbor::Runtime::create(flags.runtime);
  if (!rt) {
    std::fprintf(stderr, "http_server: cannot start the runtime: %s\n",
                 rt.error().message().c_str());
    return 2;
  }
  static ShutdownSwitch shutdown;  // outlives the detached signal thread
  std::thread([signals] {
    int signal = 0;
    sigwait(&signals, &signal);
    shutdown.request();
  }).detach();
  return (*rt)->block_on(serve(**rt, flags, shutdown));
}
