// Name resolution: latency of one lookup and throughput of concurrent ones, three ways:
//   gai    getaddrinfo() on the calling thread(s): the floor for arbor's way
//   arbor  arbor::resolve(): getaddrinfo() on the runtime's blocking pool, awaited by tasks
//   cares  c-ares (ares_getaddrinfo) driven by its own poll loop, all queries in one thread
// for a numeric host, "localhost" (the hosts file) and a name only a DNS server knows, which
// `resolve --serve-dns` answers on 127.0.0.1:53 (compare-resolve runs everything in private
// mount and network namespaces, so that /etc/resolv.conf can point there without touching the
// machine's). Figures, not a test: see perf/compare-resolve and docs/benchmarks.md ("Names").
//
//   resolve --mode gai|arbor|cares --name NAME [--count N] [--concurrency C]
//   resolve --serve-dns            (answers A with 127.0.0.1 and AAAA with ::1, TTL 0)
#if defined(ARBOR_PERF_CARES)
#include <ares.h>
#endif
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// --- the DNS responder --------------------------------------------------------------------

int serve_dns() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(53);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("serve-dns: bind 127.0.0.1:53");
    return 1;
  }
  unsigned char q[512];
  unsigned char r[512];
  for (;;) {
    sockaddr_in from{};
    socklen_t from_len = sizeof from;
    const ssize_t n = ::recvfrom(fd, q, sizeof q, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 12) continue;
    std::size_t at = 12;  // the question: labels, then type and class
    while (at < static_cast<std::size_t>(n) && q[at] != 0)
      at += q[at] + 1u;
    if (at + 5 > static_cast<std::size_t>(n)) continue;
    const unsigned type = q[at + 1] << 8 | q[at + 2];
    const std::size_t question_end = at + 5;
    std::memcpy(r, q, question_end);
    r[2] = 0x81;  // QR, RD
    r[3] = 0x80;  // RA, NOERROR
    r[6] = 0;     // answers
    r[7] = 0;
    r[8] = r[9] = r[10] = r[11] = 0;
    std::size_t len = question_end;
    if (type == 1 || type == 28) {
      r[7] = 1;
      const unsigned char head[] = {0xc0, 0x0c, 0, static_cast<unsigned char>(type),
                                    0,    1,    0, 0,
                                    0,    0,    0, static_cast<unsigned char>(type == 1 ? 4 : 16)};
      std::memcpy(r + len, head, sizeof head);
      len += sizeof head;
      if (type == 1) {
        const unsigned char v4[4] = {127, 0, 0, 1};
        std::memcpy(r + len, v4, 4);
        len += 4;
      } else {
        unsigned char v6[16] = {};
        v6[15] = 1;
        std::memcpy(r + len, v6, 16);
        len += 16;
      }
    }
    ::sendto(fd, r, len, 0, reinterpret_cast<sockaddr*>(&from), from_len);
  }
}

// --- the three ways -----------------------------------------------------------------------

bool gai_once(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  if (::getaddrinfo(name.c_str(), "80", &hints, &list) != 0) return false;
  ::freeaddrinfo(list);
  return true;
}

struct Figures {
  std::vector<double> latencies;  // us, sequential lookups
  double per_second = 0;          // concurrent lookups
  int failures = 0;
};

Figures run_gai(const std::string& name, int count, int concurrency) {
  Figures f;
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    if (!gai_once(name)) ++f.failures;
    f.latencies.push_back(us(Clock::now() - t0));
  }
  std::atomic<int> failures{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < count / concurrency; ++i)
        if (!gai_once(name)) failures.fetch_add(1);
    });
  for (auto& t : threads)
    t.join();
  f.per_second = (count / concurrency) * concurrency / (us(Clock::now() - t0) / 1e6);
  f.failures += failures.load();
  return f;
}

Figures run_arbor(const std::string& name, int count, int concurrency) {
  arbor::RuntimeOptions o = *arbor::RuntimeOptions::from_env();
  o.blocking.max_threads = std::max(concurrency, 1);
  arbor::Runtime rt(o);
  Figures f;
  f.failures = rt.block_on([](arbor::Runtime& rt, const std::string& name, int count,
                              std::vector<double>& out) -> arbor::Task<int> {
    int failures = 0;
    for (int i = 0; i < count; ++i) {
      const auto t0 = Clock::now();
      auto r = co_await arbor::resolve(rt, name, 80);
      out.push_back(us(Clock::now() - t0));
      if (!r) ++failures;
    }
    co_return failures;
  }(rt, name, count, f.latencies));
  const auto t0 = Clock::now();
  std::vector<arbor::JoinHandle<int>> tasks;
  for (int t = 0; t < concurrency; ++t)
    tasks.push_back(
        rt.spawn([](arbor::Runtime& rt, const std::string& name, int n) -> arbor::Task<int> {
          int failures = 0;
          for (int i = 0; i < n; ++i)
            if (!co_await arbor::resolve(rt, name, 80)) ++failures;
          co_return failures;
        }(rt, name, count / concurrency)));
  for (auto& t : tasks)
    f.failures += t.join_blocking();
  f.per_second = (count / concurrency) * concurrency / (us(Clock::now() - t0) / 1e6);
  return f;
}

#if defined(ARBOR_PERF_CARES)
struct CaresLoop {
  ares_channel channel = nullptr;
  CaresLoop() {
    ares_library_init(ARES_LIB_INIT_ALL);
    if (ares_init(&channel) != ARES_SUCCESS) std::abort();
  }
  ~CaresLoop() {
    ares_destroy(channel);
    ares_library_cleanup();
  }
  // Runs the channel until fewer than `stop_below` queries are pending (1: all answered).
  void run(const int& pending, int stop_below = 1) {
    while (pending >= stop_below) {
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      const int bits = ares_getsock(channel, socks, ARES_GETSOCK_MAXNUM);
      std::vector<pollfd> fds;
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        short ev = 0;
        if (ARES_GETSOCK_READABLE(bits, i)) ev |= POLLIN;
        if (ARES_GETSOCK_WRITABLE(bits, i)) ev |= POLLOUT;
        if (ev != 0) fds.push_back({socks[i], ev, 0});
      }
      timeval tv{};
      timeval* tvp = ares_timeout(channel, nullptr, &tv);
      const int ms =
          tvp == nullptr ? 1000 : static_cast<int>(tvp->tv_sec * 1000 + tvp->tv_usec / 1000);
      ::poll(fds.data(), fds.size(), fds.empty() ? 0 : ms);
      if (fds.empty()) {
        ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        continue;
      }
      for (auto& p : fds)
        ares_process_fd(channel, p.revents & (POLLIN | POLLERR | POLLHUP) ? p.fd : ARES_SOCKET_BAD,
                        p.revents & POLLOUT ? p.fd : ARES_SOCKET_BAD);
    }
  }
};

struct CaresQuery {
  int* pending;
  int* failures;
  static void done(void* arg, int status, int, ares_addrinfo* result) {
    auto* q = static_cast<CaresQuery*>(arg);
    if (status != ARES_SUCCESS) ++*q->failures;
    if (result != nullptr) ares_freeaddrinfo(result);
    --*q->pending;
  }
};

void cares_start(CaresLoop& loop, const std::string& name, CaresQuery& q) {
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = ARES_AI_NUMERICSERV;
  ++*q.pending;
  ares_getaddrinfo(loop.channel, name.c_str(), "80", &hints, &CaresQuery::done, &q);
}

Figures run_cares(const std::string& name, int count, int concurrency) {
  Figures f;
  CaresLoop loop;
  int pending = 0;
  CaresQuery q{&pending, &f.failures};
  for (int i = 0; i < count; ++i) {
    const auto t0 = Clock::now();
    cares_start(loop, name, q);
    loop.run(pending);
    f.latencies.push_back(us(Clock::now() - t0));
  }
  // `concurrency` queries in flight at once, refilled as they answer.
  const int total = (count / concurrency) * concurrency;
  int started = 0;
  const auto t0 = Clock::now();
  while (started < total) {
    while (pending < concurrency && started < total) {
      cares_start(loop, name, q);
      ++started;
    }
    loop.run(pending, concurrency);  // until one answers and there is room again
  }
  loop.run(pending);
  f.per_second = total / (us(Clock::now() - t0) / 1e6);
  return f;
}
#endif

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<std::size_t>(p * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "arbor";
  std::string name = "localhost";
  int count = 2000;
  int concurrency = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--serve-dns") return serve_dns();
    if (a == "--mode")
      mode = next();
    else if (a == "--name")
      name = next();
    else if (a == "--count")
      count = std::atoi(next().c_str());
    else if (a == "--concurrency")
      concurrency = std::max(1, std::atoi(next().c_str()));
    else {
      std::fprintf(stderr,
                   "usage: resolve --mode gai|arbor|cares --name NAME [--count N] "
                   "[--concurrency C] | --serve-dns\n");
      return 2;
    }
  }
  Figures f;
  if (mode == "gai") {
    f = run_gai(name, count, concurrency);
  } else if (mode == "arbor") {
    f = run_arbor(name, count, concurrency);
#if defined(ARBOR_PERF_CARES)
  } else if (mode == "cares") {
    f = run_cares(name, count, concurrency);
#endif
  } else {
    std::fprintf(stderr, "mode %s not built\n", mode.c_str());
    return 2;
  }
  std::printf(
      "%-5s %-12s latency p50 %8.1f us p99 %8.1f us   %9.0f lookups/s at %d concurrent"
      "   failures %d\n",
      mode.c_str(), name.c_str(), percentile(f.latencies, 0.5), percentile(f.latencies, 0.99),
      f.per_second, concurrency, f.failures);
  return f.failures == 0 ? 0 : 1;
}
