// perf/blocking_region: what entering a BlockingRegion costs, by engine and io mode, with N
// sockets each waiting for a read. With a ring per worker (io_uring's default, rings) a region
// moves its worker's sockets to the other rings, cancelling their reads and starting them again
// there; with one shared ring or epoll set (workers) it moves nothing, which is the baseline.
//
//   blocking_region [--engine uring|epoll] [--mode rings|workers|pollers] [--sockets N]
//                   [--regions R]
//
// Two workers. Each region is entered by a fresh task submitted from outside the runtime, on
// whichever worker takes it; a region on a worker whose ring holds no socket moves nothing.
// Prints, for the regions that moved sockets and for those that moved none, how many there
// were and their entry time (median, p99, µs), and the median entry time per moved socket (the
// engine's ring_moves counter, read around each region). Then every reader gets its byte,
// which checks that no read was lost.
#include "arbor/sched/blocking_region.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "arbor/arbor.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string engine = "uring";
  std::string mode = "rings";
  int sockets = 500;
  int regions = 2000;
};

struct Sample {
  std::int64_t ns;
  std::uint64_t moved;
};

arbor::Task<Sample> enter_region(arbor::Runtime& rt) {
  const std::uint64_t before = rt.engine().counters().get("ring_moves");
  const auto start = Clock::now();
  std::int64_t ns;
  {
    arbor::sched::BlockingRegion region;
    ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }
  co_return Sample{ns, rt.engine().counters().get("ring_moves") - before};
}

arbor::Task<bool> read_one(arbor::TcpStream& s) {
  std::byte b[1];
  auto n = co_await s.read_some(b);
  co_return n&&* n == 1;
}

struct Connections {
  std::vector<arbor::TcpStream> clients, servers;
  std::vector<arbor::JoinHandle<bool>> readers;
};

arbor::Task<std::string> connect(arbor::Runtime& rt, const Config& c, Connections& k) {
  auto listener = arbor::TcpListener::bind(rt, arbor::Address::loopback_v4(0));
  if (!listener) co_return "bind: " + listener.error().message();
  std::vector<arbor::TcpStream> clients, servers;
  for (int i = 0; i < c.sockets; ++i) {
    auto accepted = rt.spawn(listener->accept());
    auto client = co_await arbor::TcpStream::connect(rt, *listener->local_address());
    auto server = co_await std::move(accepted);
    if (!client || !server) co_return "connect " + std::to_string(i);
    k.clients.push_back(std::move(*client));
    k.servers.push_back(std::move(*server));
  }
  for (auto& s : k.servers)
    k.readers.push_back(rt.spawn(read_one(s)));
  for (int i = 0; i < 100; ++i)  // the readers wait in the engine before the first region
    co_await arbor::yield();
  co_return "";
}

arbor::Task<std::string> finish(Connections& k) {
  for (auto& client : k.clients)
    if (!co_await client.write_all(std::as_bytes(std::span("x", 1)))) co_return "write";
  int lost = 0;
  for (auto& h : k.readers)
    if (!co_await std::move(h)) ++lost;
  if (lost != 0) co_return std::to_string(lost) + " read(s) lost";
  co_return "";
}

void report(const char* what, std::vector<double> v) {
  if (v.empty()) {
    std::printf("  %s: none\n", what);
    return;
  }
  std::sort(v.begin(), v.end());
  std::printf("  %s: %zu, median %.2f, p99 %.2f\n", what, v.size(), v[v.size() / 2],
              v[v.size() * 99 / 100]);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--engine") {
      c.engine = argv[i + 1];
    } else if (flag == "--mode") {
      c.mode = argv[i + 1];
    } else if (flag == "--sockets") {
      c.sockets = std::atoi(argv[i + 1]);
    } else if (flag == "--regions") {
      c.regions = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  auto mode = arbor::io::parse_io_mode(c.mode);
  if (!mode || c.sockets < 0 || c.regions < 1) {
    std::fprintf(stderr,
                 "usage: blocking_region [--engine E] [--mode M] [--sockets N] "
                 "[--regions R]\n");
    return 2;
  }
  rlimit files{};  // two descriptors per connection, and a few more
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  arbor::RuntimeOptions o;
  o.scheduler.workers = 2;
  o.engine.kind = c.engine;
  o.engine.io_mode = *mode;
  auto rt = arbor::Runtime::create(o);
  if (!rt) {
    std::fprintf(stderr, "runtime: %s\n", rt.error().message().c_str());
    return 1;
  }
  Connections k;
  std::string failed = (*rt)->block_on(connect(**rt, c, k));
  std::vector<double> idle_us, moving_us, per_socket_us, moved;
  for (int r = 0; r < c.regions && failed.empty(); ++r) {
    const Sample x = (*rt)->block_on(enter_region(**rt));
    const double us = static_cast<double>(x.ns) / 1e3;
    if (x.moved == 0) {
      idle_us.push_back(us);
    } else {
      moving_us.push_back(us);
      moved.push_back(static_cast<double>(x.moved));
      per_socket_us.push_back(us / static_cast<double>(x.moved));
    }
  }
  if (failed.empty()) failed = (*rt)->block_on(finish(k));
  if (!failed.empty()) {
    std::fprintf(stderr, "blocking_region: %s\n", failed.c_str());
    return 1;
  }
  std::printf("%s %s, %d sockets waiting, %d regions:\n", c.engine.c_str(), c.mode.c_str(),
              c.sockets, c.regions);
  report("regions that moved nothing, entry us", idle_us);
  report("regions that moved sockets, entry us", moving_us);
  report("  sockets they moved", moved);
  report("  entry us per moved socket", per_socket_us);
  return 0;
}
