// Load for perf/compare-websocket: CONNS WebSocket connections (one thread each, blocking
// POSIX sockets, no Beast, so it costs the servers' comparison nothing of its own), each
// sending one masked binary message of SIZE bytes and waiting for its echo, for SECONDS.
// Every connection is made (and upgraded) before the clock starts, so a slow connect (a SYN
// retransmitted after a second) is not counted as a slow echo; how long that took goes to
// stderr. Prints "messages=N rate=R p50_us=X p99_us=Y".
//
//   websocket_load PORT SECONDS CONNS SIZE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

bool send_all(int fd, const void* data, std::size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
bool recv_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

int connect_ws(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const std::string upgrade =
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
  if (!send_all(fd, upgrade.data(), upgrade.size())) return -1;
  std::string head;
  char c;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (::recv(fd, &c, 1, 0) != 1) return -1;
    head += c;
  }
  if (head.rfind("HTTP/1.1 101", 0) != 0) return -1;
  return fd;
}

// One binary frame, masked (clients must mask), payload below 64 KiB.
std::vector<unsigned char> frame(std::size_t size) {
  std::vector<unsigned char> f{0x82};
  if (size < 126) {
    f.push_back(static_cast<unsigned char>(0x80 | size));
  } else {
    f.push_back(0x80 | 126);
    f.push_back(static_cast<unsigned char>(size >> 8));
    f.push_back(static_cast<unsigned char>(size & 0xff));
  }
  const unsigned char mask[4] = {1, 2, 3, 4};
  f.insert(f.end(), mask, mask + 4);
  for (std::size_t i = 0; i < size; ++i)
    f.push_back(static_cast<unsigned char>('x' ^ mask[i % 4]));
  return f;
}

bool read_echo(int fd, std::size_t size, std::vector<unsigned char>& body) {
  unsigned char h[4];
  if (!recv_all(fd, h, 2)) return false;
  std::size_t n = h[1] & 0x7f;
  if (n == 126) {
    if (!recv_all(fd, h + 2, 2)) return false;
    n = (static_cast<std::size_t>(h[2]) << 8) | h[3];
  }
  body.resize(n);
  return n == size && recv_all(fd, body.data(), n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: websocket_load PORT SECONDS CONNS SIZE\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  const int conns = std::atoi(argv[3]);
  const auto size = static_cast<std::size_t>(std::atoi(argv[4]));
  if (size >= 65536) return 2;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::mutex m;
  std::vector<double> all;
  std::vector<std::thread> threads;
  std::latch connected(conns + 1);
  const auto connecting = Clock::now();
  for (int i = 0; i < conns; ++i)
    threads.emplace_back([&] {
      const int fd = connect_ws(port);
      connected.arrive_and_wait();
      if (fd < 0) {
        failed = true;
        return;
      }
      const auto out = frame(size);
      std::vector<unsigned char> body;
      std::vector<double> mine;
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = Clock::now();
        if (!send_all(fd, out.data(), out.size()) || !read_echo(fd, size, body)) {
          failed = true;
          break;
        }
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      ::close(fd);
      std::lock_guard g(m);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  connected.arrive_and_wait();
  const auto start = Clock::now();
  std::fprintf(stderr, "websocket_load: %d connections upgraded in %.1f ms\n", conns,
               std::chrono::duration<double, std::milli>(start - connecting).count());
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the run's length
  stop = true;
  for (auto& t : threads)
    t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(all.begin(), all.end());
  const auto pct = [&](double p) {
    return all.empty() ? 0.0
                       : all[static_cast<std::size_t>(p * static_cast<double>(all.size() - 1))];
  };
  std::printf("messages=%zu rate=%.0f p50_us=%.1f p99_us=%.1f%s\n", all.size(),
              static_cast<double>(all.size()) / elapsed, pct(0.5), pct(0.99),
              failed ? " (a connection failed)" : "");
  return failed ? 1 : 0;
}
