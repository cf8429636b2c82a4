// perf/runtime_lifecycle: what creating and destroying a Runtime costs, by engine and io mode
// (issue 28: 44 ms on io_uring against 0.2 ms on epoll, which adds up in a test suite that
// builds a runtime per test).
//
//   runtime_lifecycle [--engine uring|epoll] [--mode auto|rings|workers|pollers] [--workers N]
//                     [--rounds R] [--first-task]
//
// Each round creates a Runtime with the options given (the engine's own default io mode with
// --mode auto), optionally runs one empty task on it (--first-task: the cost a test that uses
// it pays on top), and destroys it; it times create and destroy apart. Prints one line: the
// engine and mode, then the median and p90 of create, destroy and their sum (µs).
// perf/compare-runtime-lifecycle runs it for every engine side by side.
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
  std::string mode = "auto";
  int workers = 2;
  int rounds = 200;
  bool first_task = false;
};

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[i];
}

arbor::Task<int> nothing() {
  co_return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: runtime_lifecycle [--engine uring|epoll] [--mode auto|rings|workers|pollers]"
               " [--workers N] [--rounds R] [--first-task]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--engine" && has_value)
      c.engine = argv[++i];
    else if (a == "--mode" && has_value)
      c.mode = argv[++i];
    else if (a == "--workers" && has_value)
      c.workers = std::atoi(argv[++i]);
    else if (a == "--rounds" && has_value)
      c.rounds = std::atoi(argv[++i]);
    else if (a == "--first-task")
      c.first_task = true;
    else
      return usage();
  }
  auto mode = arbor::io::parse_io_mode(c.mode);
  if (!mode || c.workers < 1 || c.rounds < 1) return usage();
  arbor::RuntimeOptions options;
  options.engine.kind = c.engine;
  options.engine.io_mode = *mode;
  options.scheduler.workers = c.workers;

  std::vector<double> create, destroy, total;
  std::string ran_mode;
  for (int r = 0; r < c.rounds; ++r) {
    const auto t0 = Clock::now();
    auto rt = arbor::Runtime::create(options);
    const auto t1 = Clock::now();
    if (!rt) {
      std::fprintf(stderr, "runtime_lifecycle: %s\n", rt.error().message().c_str());
      return 1;
    }
    if (ran_mode.empty()) ran_mode = arbor::io::to_string(*(*rt)->engine().options().io_mode);
    if (c.first_task && (*rt)->block_on(nothing()) != 0) return 1;
    const auto t2 = Clock::now();
    rt->reset();
    const auto t3 = Clock::now();
    create.push_back(micros(t1 - t0));
    destroy.push_back(micros(t3 - t2));
    total.push_back(micros(t1 - t0) + micros(t3 - t2));
  }
  std::printf(
      "%-6s %-8s %d workers%s | create %8.1f us (p90 %8.1f) | destroy %8.1f us (p90 %8.1f) | "
      "both %8.1f us (p90 %8.1f) | %d rounds\n",
      c.engine.c_str(), ran_mode.c_str(), c.workers, c.first_task ? ", first task" : "",
      percentile(create, 0.5), percentile(create, 0.9), percentile(destroy, 0.5),
      percentile(destroy, 0.9), percentile(total, 0.5), percentile(total, 0.9), c.rounds);
  return 0;
}
