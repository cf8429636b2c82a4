// The server skeleton both Asio baselines share, written as a competent Asio user would: one
// io_context per thread (threads = CPUs in the affinity mask, or argv[2]), the acceptor on
// the first, accepted sockets spread round-robin with TCP_NODELAY, SIGINT/SIGTERM stop.
// Listens on 127.0.0.1:argv[1] (default 0: any port) and prints "ready <port>".
//
//   int main(int argc, char** argv) { return serve_per_thread<Session>(argc, argv); }
//
// Session(tcp::socket) is made shared and start()ed for every accepted connection.
#pragma once

#include <sched.h>

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
// (keep the blank line: clang-format must not sort Boost above <utility>)

#include <boost/asio.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

inline int affinity_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

template <class Session>
int serve_per_thread(int argc, char** argv) {
  const int threads = argc > 2 ? std::atoi(argv[2]) : affinity_cpus();
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  for (int i = 0; i < threads; ++i)
    contexts.push_back(std::make_unique<asio::io_context>(1));
  const auto port = argc > 1 ? static_cast<unsigned short>(std::atoi(argv[1])) : 0;
  tcp::acceptor acceptor(*contexts[0], tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  std::size_t next = 0;
  std::function<void()> accept = [&] {
    auto& ctx = *contexts[next++ % contexts.size()];
    acceptor.async_accept(ctx, [&](boost::system::error_code ec, tcp::socket socket) {
      if (!ec) {
        socket.set_option(tcp::no_delay(true));
        std::make_shared<Session>(std::move(socket))->start();
      }
      accept();
    });
  };
  accept();
  asio::signal_set signals(*contexts[0], SIGINT, SIGTERM);
  signals.async_wait([&](auto, int) {
    for (auto& c : contexts)
      c->stop();
  });
  std::printf("ready %u\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (auto& c : contexts)
    guards.push_back(asio::make_work_guard(*c));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back([&, i] { contexts[static_cast<std::size_t>(i)]->run(); });
  contexts[0]->run();
  for (auto& c : contexts)
    c->stop();
  for (auto& t : pool)
    t.join();
  return 0;
}
