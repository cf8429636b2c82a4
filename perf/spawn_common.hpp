// Shared by perf/spawn.cpp (arbor) and perf/baselines/asio_spawn.cpp: spawn throughput.
//
//   spawn outside|inside [ITEMS] [--threads N]
//     outside  one external thread submits ITEMS tiny items (default 10^7)
//     inside   fan-out: item i submits items 2i+1 and 2i+2 from a worker, until ITEMS ran
// Each item decrements one shared counter; the last one wakes main. Prints items/s.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

namespace spawn_bench {

struct Config {
  bool inside = false;
  std::int64_t items = 10'000'000;
  int threads = 0;
};

inline Config parse(int argc, char** argv) {
  Config c;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      c.threads = std::atoi(argv[++i]);
    } else if (positional == 0 && (a == "outside" || a == "inside")) {
      c.inside = a == "inside";
      ++positional;
    } else if (positional == 1) {
      c.items = std::atoll(argv[i]);
      ++positional;
    } else {
      std::fprintf(stderr, "usage: %s outside|inside [ITEMS] [--threads N]\n", argv[0]);
      std::exit(2);
    }
  }
  if (c.items <= 0 || c.threads < 0) {
    std::fprintf(stderr, "%s: ITEMS and --threads must be positive\n", argv[0]);
    std::exit(2);
  }
  if (c.threads == 0) c.threads = static_cast<int>(std::thread::hardware_concurrency());
  return c;
}

inline void report(const char* runtime, const Config& c, std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  std::printf("%s | spawn %-7s | %lld items | %d threads | %.3f s | %.2f M items/s\n", runtime,
              c.inside ? "inside" : "outside", static_cast<long long>(c.items), c.threads, s,
              static_cast<double>(c.items) / s / 1e6);
}

}  // namespace spawn_bench
