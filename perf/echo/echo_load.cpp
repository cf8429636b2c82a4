// Load generator for perf/compare-echo (plain sockets, one thread, no arbor, no Asio).
//
//   echo_load PORT pingpong SECONDS [CONNS [SIZE]]     one connection (CONNS is ignored), one
//                                                      message in flight
//   echo_load PORT throughput SECONDS [CONNS [SIZE]]   CONNS connections (default 100), one
//                                                      message each
// SIZE: bytes per message, default 64.
//
// Prints one line: messages, messages/s and round-trip p50/p99 in microseconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::perror("connect");
    std::exit(1);
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void report(const char* mode, std::size_t conns, std::vector<std::uint32_t>& rtt, double secs) {
  std::sort(rtt.begin(), rtt.end());
  auto pct = [&](double p) {
    return rtt.empty()
               ? 0.0
               : rtt[std::min(rtt.size() - 1, static_cast<std::size_t>(p * rtt.size()))] / 1000.0;
  };
  std::printf("mode=%s conns=%zu messages=%zu rate=%.0f p50_us=%.1f p99_us=%.1f\n", mode, conns,
              rtt.size(), rtt.size() / secs, pct(0.50), pct(0.99));
}

std::uint32_t ns_since(Clock::time_point t) {
  return static_cast<std::uint32_t>(std::min<long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count(), UINT32_MAX));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: echo_load PORT pingpong|throughput SECONDS [CONNS] [SIZE]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string mode = argv[2];
  const double seconds = std::atof(argv[3]);
  const bool pingpong = mode == "pingpong";
  const std::size_t conns =
      pingpong ? 1 : static_cast<std::size_t>(argc > 4 ? std::atoi(argv[4]) : 100);
  // SIZE is the fifth argument in both modes (ping-pong ignores CONNS): until 2026-12-04 it was
  // the fourth in ping-pong, so perf/compare-echo's ping-pong, which passes CONNS 1, sent
  // 1-byte messages.
  const std::size_t size = static_cast<std::size_t>(argc > 5 ? std::atoi(argv[5]) : 64);
  std::vector<char> out(size, 'x'), in(size);
  std::vector<std::uint32_t> rtt;
  rtt.reserve(1 << 24);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  const auto start = Clock::now();

  if (pingpong) {
    const int fd = connect_to(port);
    while (Clock::now() < end) {
      const auto t = Clock::now();
      if (::send(fd, out.data(), size, 0) != static_cast<ssize_t>(size)) return 1;
      for (std::size_t got = 0; got < size;) {
        const ssize_t n = ::recv(fd, in.data() + got, size - got, 0);
        if (n <= 0) return 1;
        got += static_cast<std::size_t>(n);
      }
      if (rtt.size() < rtt.capacity()) rtt.push_back(ns_since(t));
    }
    ::close(fd);
  } else {
    struct Conn {
      int fd;
      std::size_t got = 0;
      Clock::time_point sent;
    };
    std::vector<Conn> c(conns);
    const int ep = ::epoll_create1(0);
    for (std::size_t i = 0; i < conns; ++i) {
      c[i].fd = connect_to(port);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      ::epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
    }
    for (auto& k : c) {
      k.sent = Clock::now();
      if (::send(k.fd, out.data(), size, 0) != static_cast<ssize_t>(size)) return 1;
    }
    std::vector<epoll_event> events(conns);
    while (Clock::now() < end) {
      const int n = ::epoll_wait(ep, events.data(), static_cast<int>(conns), 100);
      for (int e = 0; e < n; ++e) {
        Conn& k = c[events[static_cast<std::size_t>(e)].data.u64];
        const ssize_t r = ::recv(k.fd, in.data(), size - k.got, MSG_DONTWAIT);
        if (r == 0) return 1;
        if (r < 0) continue;
        k.got += static_cast<std::size_t>(r);
        if (k.got < size) continue;
        k.got = 0;
        if (rtt.size() < rtt.capacity()) rtt.push_back(ns_since(k.sent));
        k.sent = Clock::now();
        if (::send(k.fd, out.data(), size, 0) != static_cast<ssize_t>(size)) return 1;
      }
    }
    for (auto& k : c)
      ::close(k.fd);
    ::close(ep);
  }
  report(mode.c_str(), conns, rtt, std::chrono::duration<double>(Clock::now() - start).count());
  return 0;
}
