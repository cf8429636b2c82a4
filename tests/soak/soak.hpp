// What the soak driver's parts share: the run's settings, its stop flag, the client-side
// counters and the error log. Every load component counts only responses it verified, and
// reports every failure through Errors::fail(), so the error count is the one figure the pass
// verdict rests on; expected outcomes of abuse (a slowloris cut, an idle connection expired, a
// connection reset on purpose) have counters of their own and are never errors.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../http/http_client.hpp"

namespace arbor::soak {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

/// The server's timeouts the driver sets (and relies on: it waits for them to fire).
struct ServerTimeouts {
  Millis header{2000};  // short, so slowloris connections are cut every few seconds
  Millis idle{5000};    // short, so idle connections expire and reconnect within a run
};

/// How many connections of each kind; small enough for a 2-core machine and far below the
/// server's --max-connections (10000) and the 20,000-descriptor limit.
struct Shape {
  int keepalive = 3;     // connections issuing GETs back to back
  int idle = 200;        // keep-alive connections that sit idle between requests
  int idle_expire = 20;  // of those, the ones left idle until the server closes them
  int slowloris = 16;    // connections trickling a head that never ends
  int burst = 48;        // connections opened at once, once a second
  int uploads = 2;       // connections POSTing bodies to /echo
};

/// Client-side counters, read by the sampler while the load runs (relaxed: they are figures,
/// not synchronisation).
struct Counters {
  std::atomic<std::uint64_t> requests{0};        // responses verified (status and body)
  std::atomic<std::uint64_t> uploads{0};         // of which, /echo bodies compared
  std::atomic<std::uint64_t> upload_bytes{0};    // bytes in those bodies
  std::atomic<std::uint64_t> slowloris_cuts{0};  // trickled heads the server cut off
  std::atomic<std::uint64_t> idle_expiries{0};   // idle connections the server closed
  std::atomic<std::uint64_t> resets{0};          // connections reset on purpose (SO_LINGER 0)
  std::atomic<std::uint64_t> connections{0};     // connections opened by the load
  void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  static std::uint64_t get(const std::atomic<std::uint64_t>& c) {
    return c.load(std::memory_order_relaxed);
  }
};

/// Every client error: counted, the first few kept verbatim for the summary.
class Errors {
 public:
  void fail(const char* component, const std::string& what) {
    const auto n = count_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex_);
    if (n < kKept) first_.push_back(std::string(component) + ": " + what);
    if (n < kPrinted) std::fprintf(stderr, "soak: error: %s: %s\n", component, what.c_str());
  }
  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  std::vector<std::string> first() const {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  static constexpr std::uint64_t kKept = 10, kPrinted = 20;
  std::atomic<std::uint64_t> count_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> first_;
};

/// What every component gets. `stop` is set once, when the load ends; components check it at
/// least every 100 ms and between requests, and close all their connections before returning.
struct Context {
  int port = 0;
  ServerTimeouts timeouts;
  Shape shape;
  std::atomic<bool> stop{false};
  Counters counters;
  Errors errors;

  bool stopping() const { return stop.load(std::memory_order_relaxed); }
  /// Sleeps `d`, waking early if the load stops: false then.
  bool nap(Millis d) const {
    const auto until = Clock::now() + d;
    while (!stopping()) {
      const auto left = until - Clock::now();
      if (left <= Millis(0)) return true;
      std::this_thread::sleep_for(std::min<Clock::duration>(left, Millis(100)));
    }
    return false;
  }
};

using http_test::Client;
using http_test::Response;

/// A connected client to the server (from `source`, another loopback address, if given), with
/// a send bound as well as http_client.hpp's 10 s receive bound, so a stuck server fails a
/// component instead of hanging it. Null (and an error reported) if it cannot connect.
inline std::unique_ptr<Client> connect(Context& ctx, const char* component,
                                       const char* source = nullptr) {
  auto c = std::make_unique<Client>(ctx.port, source);
  if (!c->connected()) {
    ctx.errors.fail(component, std::string("connect failed: ") + std::strerror(errno));
    return nullptr;
  }
  timeval tv{10, 0};
  ::setsockopt(c->fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ctx.counters.add(ctx.counters.connections);
  return c;
}

/// The bodies the fixed routes answer with.
inline constexpr const char* kPlaintextBody = "Hello, World!";
inline constexpr const char* kJsonBody = R"({"message":"Hello, World!"})";

}  // namespace arbor::soak
