// perf/blocking_region: what entering a BlockingRegion costs, by engine and io mode, with N
// sockets each waiting for a read. With a ring per worker (io_uring's default, rings) a region
// moves its worker's sockets to the other rings, cancelling their reads and starting them again
// there; with one shared ring or epoll set (workers) it moves nothing, which is the baseline.
//
//   blocking_region [--engine uring|epoll] [--mode rings|workers|pollers] [--sockets N]
//                   [--regions R]
//
// Two workers. Each region is entered by a fresh task, on whichever worker runs it; a region
// on a worker whose ring holds no socket moves nothing. Prints the regions' entry time (median,
// p99, µs), the sockets moved per region (the engine's ring_moves counter), and the entry time
// per moved socket. Then every reader gets its byte, which checks that no read was lost.
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

arbor::Task<std::int64_t> enter_region() {
  const auto start = Clock::now();
  std::int64_t ns;
  {
    arbor::sched::BlockingRegion region;
    ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  }
  co_return ns;
}

arbor::Task<bool> read_one(arbor::TcpStream& s) {
  std::byte b[1];
  auto n = co_await s.read_some(b);
  co_return n&&* n == 1;
}

arbor::Task<std::string> run(arbor::Runtime& rt, const Config& c, std::vector<std::int64_t>& ns,
                             std::uint64_t& moved) {
  auto listener = arbor::TcpListener::bind(rt, arbor::Address::loopback_v4(0));
  if (!listener) co_return "bind: " + listener.error().message();
  std::vector<arbor::TcpStream> clients, servers;
  for (int i = 0; i < c.sockets; ++i) {
    auto accepted = rt.spawn(listener->accept());
    auto client = co_await arbor::TcpStream::connect(rt, *listener->local_address());
    auto server = co_await std::move(accepted);
    if (!client || !server) co_return "connect " + std::to_string(i);
    clients.push_back(std::move(*client));
    servers.push_back(std::move(*server));
  }
  std::vector<arbor::JoinHandle<bool>> readers;
  for (auto& s : servers)
    readers.push_back(rt.spawn(read_one(s)));
  for (int i = 0; i < 100; ++i)  // the readers wait in the engine before the first region
    co_await arbor::yield();
  const std::uint64_t before = rt.engine().counters().get("ring_moves");
  for (int r = 0; r < c.regions; ++r)
    ns.push_back(co_await rt.spawn(enter_region()));
  moved = rt.engine().counters().get("ring_moves") - before;
  for (auto& client : clients)
    if (!co_await client.write_all(std::as_bytes(std::span("x", 1)))) co_return "write";
  int lost = 0;
  for (auto& h : readers)
    if (!co_await std::move(h)) ++lost;
  if (lost != 0) co_return std::to_string(lost) + " read(s) lost";
  co_return "";
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
  std::vector<std::int64_t> ns;
  ns.reserve(static_cast<std::size_t>(c.regions));
  std::uint64_t moved = 0;
  const std::string failed = (*rt)->block_on(run(**rt, c, ns, moved));
  if (!failed.empty()) {
    std::fprintf(stderr, "blocking_region: %s\n", failed.c_str());
    return 1;
  }
  std::sort(ns.begin(), ns.end());
  const double median = static_cast<double>(ns[ns.size() / 2]) / 1e3;
  const double p99 = static_cast<double>(ns[ns.size() * 99 / 100]) / 1e3;
  double total = 0;
  for (auto v : ns)
    total += static_cast<double>(v) / 1e3;
  const double per_region = static_cast<double>(moved) / static_cast<double>(ns.size());
  std::printf(
      "%s %s sockets %d regions %zu: entry median %.2f us p99 %.2f us; moved %.1f sockets per "
      "region; %.3f us per moved socket\n",
      c.engine.c_str(), c.mode.c_str(), c.sockets, ns.size(), median, p99, per_region,
      moved > 0 ? total / static_cast<double>(moved) : 0.0);
  return 0;
}
