// http_soak: the HTTP example server under a long mixed load (issue 32), judged at the end.
//
//   http_soak --server PATH [--seconds N] [--csv PATH] [--interval-s N] [-- SERVER_FLAGS...]
//
// Starts the server on 127.0.0.1 (port 0, a 2 s header timeout and a 5 s idle timeout, then
// SERVER_FLAGS), runs the components of load.hpp against it for N seconds (default 600) with a
// SIGHUP and a SIGUSR1 half-way (both must be ignored), samples it every interval (sampler.hpp),
// then stops the load and checks, in order:
//   - no client error (a wrong status or body, an unexpected EOF or reset, a timeout that did
//     not fire in time, a failed connect or /metrics scrape);
//   - the server's descriptors back to their count before the first connection (kFdSlack: 0)
//     within 30 s of the last client closing, and its connection gauge back to the one scrape;
//   - no RSS sample after the warm-up above the warm-up's RSS + kRssGrowthBoundKb;
//   - SIGTERM: exit status 0 within the shutdown timeout + 10 s.
// Any failure: exit 1, with the reasons. A summary for a note goes to stdout either way. Not a
// ctest test (it runs for minutes): `make soak` runs it, SOAK_SECONDS=60 in CI.
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../child_process.hpp"
#include "load.hpp"
#include "sampler.hpp"

namespace {

using namespace arbor::soak;

// Descriptors the server may hold after the load beyond its count before it: none. Every
// connection's socket is closed once its client has gone, and the engines make no descriptor
// per connection or on first use (the listener, the rings or epoll and their eventfds all exist
// before the first line is printed), so any extra one is a leak or a connection never closed.
constexpr int kFdSlack = 0;
// RSS may grow this much past the warm-up's: the shared body buffers are allocated on first
// use (1 MiB each; the uploads' peer and the bursts' each hold at most their share of 8, so
// 16 MiB at most, most of it already in by the warm-up), and malloc arenas settle. A leak of
// 10 bytes a request is ~30 MiB over the 3 M requests of a 10-minute run.
constexpr long kRssGrowthBoundKb = 32 * 1024;

struct Options {
  std::string server;
  int seconds = 600;
  std::string csv;
  int interval_s = 10;
  std::vector<std::string> server_flags;
};

int usage(const char* why) {
  std::fprintf(stderr,
               "http_soak: %s\nusage: http_soak --server PATH [--seconds N] [--csv PATH] "
               "[--interval-s N] [-- SERVER_FLAGS...]\n",
               why);
  return 2;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      o.server_flags.assign(argv + i + 1, argv + argc);
      break;
    }
    if (i + 1 >= argc) return usage(("flag " + a + " needs a value").c_str());
    const std::string v = argv[++i];
    if (a == "--server") {
      o.server = v;
    } else if (a == "--seconds") {
      o.seconds = std::atoi(v.c_str());
      if (o.seconds < 1) return usage("--seconds must be a positive number");
    } else if (a == "--csv") {
      o.csv = v;
    } else if (a == "--interval-s") {
      o.interval_s = std::atoi(v.c_str());
      if (o.interval_s < 1) return usage("--interval-s must be a positive number");
    } else {
      return usage(("unknown flag " + a).c_str());
    }
  }
  if (o.server.empty()) return usage("--server PATH is required");
  for (const std::string& f : o.server_flags)
    if (f == "--listen" || f == "--header-timeout-ms" || f == "--idle-timeout-ms")
      return usage((f + " is the soak's to set (it waits on these timeouts)").c_str());

  Context ctx;
  std::vector<std::string> argv_server = {o.server,
                                          "--listen",
                                          "127.0.0.1:0",
                                          "--header-timeout-ms",
                                          std::to_string(ctx.timeouts.header.count()),
                                          "--idle-timeout-ms",
                                          std::to_string(ctx.timeouts.idle.count())};
  argv_server.insert(argv_server.end(), o.server_flags.begin(), o.server_flags.end());
  std::string command;
  for (const auto& w : argv_server)
    command += (command.empty() ? "" : " ") + w;
  const char* engine = std::getenv("ARBOR_ENGINE");
  std::printf("soak: %d s against %s (ARBOR_ENGINE=%s), load average %s\n", o.seconds,
              command.c_str(), engine != nullptr ? engine : "", loadavg().c_str());

  arbor::test::ChildProcess server(argv_server);
  if (server.port() == 0) {
    std::fprintf(stderr, "http_soak: the server did not say where it listens\n");
    return 1;
  }
  ctx.port = server.port();
  // Before any connection: what the descriptors must come back to.
  const ProcSample baseline = read_proc(server.pid());
  if (!baseline.ok) {
    std::fprintf(stderr, "http_soak: cannot read /proc/%d\n", server.pid());
    return 1;
  }

  std::FILE* csv = nullptr;
  if (!o.csv.empty() && (csv = std::fopen(o.csv.c_str(), "w")) == nullptr) {
    std::fprintf(stderr, "http_soak: cannot write %s: %s\n", o.csv.c_str(), std::strerror(errno));
    return 1;
  }
  Sampler sampler(ctx, server.pid(), csv, std::chrono::seconds(o.interval_s));
  std::vector<std::thread> load;
  for (int i = 0; i < ctx.shape.keepalive; ++i)
    load.emplace_back(keepalive_gets, std::ref(ctx), i);
  load.emplace_back(idle_connections, std::ref(ctx));
  load.emplace_back(slowloris, std::ref(ctx));
  load.emplace_back(bursts, std::ref(ctx));
  for (int i = 0; i < ctx.shape.uploads; ++i)
    load.emplace_back(uploads, std::ref(ctx), i);
  sampler.start();

  // The run; the server must stay up (a zombie has no VmRSS, so read_proc fails for it too).
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(o.seconds);
  bool signalled = false, died = false;
  while (Clock::now() < end) {
    std::this_thread::sleep_until(std::min(end, Clock::now() + std::chrono::seconds(1)));
    if (!read_proc(server.pid()).ok) {
      died = true;
      break;
    }
    if (!signalled && Clock::now() - start >= std::chrono::seconds(o.seconds) / 2) {
      // A process manager's or a log rotator's signals: logged and ignored, the load goes on.
      server.send_signal(SIGHUP);
      server.send_signal(SIGUSR1);
      signalled = true;
    }
  }
  ctx.stop.store(true, std::memory_order_relaxed);
  for (auto& t : load)
    t.join();
  sampler.stop();  // its last row: the load just stopped
  const double load_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<std::string> failures;
  ProcSample after{};
  double gauge = -1;
  long fd_wait_ms = -1;
  if (died) {
    const auto how = server.wait_exit(std::chrono::seconds(1));
    failures.push_back("the server died during the load (exit status " +
                       (how ? std::to_string(*how) : std::string("unknown")) +
                       "; 128 + N: signal N)");
  } else {
    // Every client socket is closed; the server's close may lag (lingering close reads up to
    // 2 s, the reset ones end at their next read). Poll, bounded.
    const auto t0 = Clock::now();
    for (;;) {
      after = read_proc(server.pid());
      if (!after.ok || after.fds <= baseline.fds + kFdSlack) break;
      if (Clock::now() - t0 > std::chrono::seconds(30)) break;
      std::this_thread::sleep_for(Millis(100));
    }
    fd_wait_ms = static_cast<long>(std::chrono::duration_cast<Millis>(Clock::now() - t0).count());
    if (!after.ok)
      failures.push_back("the server died after the load");
    else if (after.fds > baseline.fds + kFdSlack)
      failures.push_back(
          "descriptors not back to baseline within 30 s: " + std::to_string(after.fds) + " > " +
          std::to_string(baseline.fds) + " + " + std::to_string(kFdSlack));
    if (auto m = scrape_metrics(ctx.port)) {
      gauge = (*m)["arbor_http_connections"];
      // The scrape's own connection is the only one left.
      if (gauge != 1)
        failures.push_back("arbor_http_connections is " + std::to_string(gauge) +
                           " with only the scrape connected");
    } else {
      failures.push_back("GET /metrics failed after the load");
    }
  }
  if (ctx.errors.count() > 0)
    failures.push_back(std::to_string(ctx.errors.count()) + " client errors");

  // RSS: the warm-up row is the first at or after a sixth of the run (10 to 60 s in).
  const auto rows = sampler.rows();
  const double warmup_s = std::clamp(o.seconds / 6.0, 10.0, 60.0);
  const Row* warm = nullptr;
  long rss_max = 0;
  int fds_max = 0;
  for (const Row& r : rows) {
    rss_max = std::max(rss_max, r.proc.rss_kb);
    fds_max = std::max(fds_max, r.proc.fds);
    if (warm == nullptr && r.elapsed_s >= warmup_s) warm = &r;
  }
  long rss_bound = 0;
  if (warm != nullptr) {
    rss_bound = warm->proc.rss_kb + kRssGrowthBoundKb;
    for (const Row& r : rows)
      if (r.elapsed_s >= warm->elapsed_s && r.proc.rss_kb > rss_bound) {
        failures.push_back("RSS " + std::to_string(r.proc.rss_kb) + " kB at " +
                           std::to_string(static_cast<int>(r.elapsed_s)) +
                           " s, above the warm-up's " + std::to_string(warm->proc.rss_kb) +
                           " kB + " + std::to_string(kRssGrowthBoundKb) + " kB");
        break;
      }
  }

  // The stop signal: drain and exit 0 (the default --shutdown-timeout-ms is 5 s).
  std::optional<int> status;
  long stop_ms = -1;
  if (!died) {
    const auto t0 = Clock::now();
    status = server.stop(SIGTERM, std::chrono::seconds(15));
    stop_ms = static_cast<long>(std::chrono::duration_cast<Millis>(Clock::now() - t0).count());
    if (!status)
      failures.push_back("the server did not exit within 15 s of SIGTERM");
    else if (*status != 0)
      failures.push_back("the server exited with status " + std::to_string(*status));
  }
  if (csv != nullptr) std::fclose(csv);

  const auto& k = ctx.counters;
  const Row& last = rows.back();
  const double cpu_avg = last.elapsed_s > 0 ? 100.0 * last.proc.cpu_s / last.elapsed_s : 0;
  std::printf(
      "\nsoak summary: %.0f s of load, server %s (ARBOR_ENGINE=%s), load average at the end %s\n"
      "  requests verified %" PRIu64 " (%.0f/s), of which uploads %" PRIu64
      " (%.0f MiB, byte for byte); client errors %" PRIu64
      "\n"
      "  abuse (expected, not errors): slowloris cuts %" PRIu64 ", idle expiries %" PRIu64
      ", resets %" PRIu64 "; connections opened %" PRIu64
      "\n"
      "  server: arbor_http_requests_total %.0f, arbor_http_timeouts_total %.0f\n"
      "  RSS kB: start %ld, warm-up (%.0f s) %ld, max %ld, at the load's end %ld, after close "
      "%ld; bound %ld (+%ld)\n"
      "  fds: baseline %d, max %d, after close %d (allowed %d, back in %ld ms); threads %d\n"
      "  CPU: %.1f s (%.0f%% of one core on average)\n"
      "  SIGTERM: %s in %ld ms\n",
      load_s, command.c_str(), engine != nullptr ? engine : "", loadavg().c_str(),
      Counters::get(k.requests), static_cast<double>(Counters::get(k.requests)) / load_s,
      Counters::get(k.uploads), static_cast<double>(Counters::get(k.upload_bytes)) / (1 << 20),
      ctx.errors.count(), Counters::get(k.slowloris_cuts), Counters::get(k.idle_expiries),
      Counters::get(k.resets), Counters::get(k.connections), last.srv_requests, last.srv_timeouts,
      rows.front().proc.rss_kb, warmup_s, warm ? warm->proc.rss_kb : 0L, rss_max, last.proc.rss_kb,
      after.rss_kb, rss_bound, kRssGrowthBoundKb, baseline.fds, fds_max, after.fds,
      baseline.fds + kFdSlack, fd_wait_ms, last.proc.threads, last.proc.cpu_s, cpu_avg,
      status ? ("exit " + std::to_string(*status)).c_str() : "no exit", stop_ms);
  if (!o.csv.empty()) std::printf("  CSV: %s\n", o.csv.c_str());
  for (const auto& e : ctx.errors.first())
    std::printf("  error: %s\n", e.c_str());
  if (failures.empty()) {
    std::printf("soak: PASS\n");
    return 0;
  }
  for (const auto& f : failures)
    std::printf("soak: FAIL: %s\n", f.c_str());
  return 1;
}
