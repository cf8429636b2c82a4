// Shared by perf/roundtrip.cpp (arbor) and perf/baselines/asio_roundtrip.cpp (Boost.Asio): the
// command line, the busy-waits and the output format of the request/reply round trip ported
// from a thread-pool regression report (a request item queues its reply, then keeps running a
// housekeeping tail; see docs/benchmarks.md). Keeping them in one place is what
// makes the two programs measure the same thing.
//
//   roundtrip MODE [WARMUP] [REQUESTS] [--chunked] [--threads N] [--tail-ns N]
//     MODE        exit | housekeeping | spaced
//     WARMUP      untimed round trips first (default 20,000; the chunked mode has none)
//     REQUESTS    timed round trips (default 200,000; 50,000 for spaced)
//     --chunked   run for 10 s printing the per-request average of every 20,000 requests
//     --tail-ns N housekeeping tail: busy until N ns of steady_clock have passed (default 1,000)
//     --pause-ns  print the measured cost of one pause iteration and exit
//     --per-worker-parking  arbor only: each worker parks on a futex of its own (the protocol of
//                 the ring-per-worker mode) instead of the shared LIFO semaphore
//
// One round trip: the client (running on the pool) queues the server item to the global
// queue; the server item queues the reply item to the global queue and then, in housekeeping
// mode, keeps its thread busy for --tail-ns of tail work; the reply item completes the request
// by queueing the client's continuation (prefer-local, as a continuation run asynchronously
// is). Only the awaited round trip is timed; the spaced mode's gap sits outside the window.
//
// The tail is measured in time, not in pause instructions: a pause costs 20-67 ns on this
// project's VM from run to run and ~1 ns on other CPUs, so a pause count meant a different
// tail on every machine and every run. The gap between spaced requests (outside the timed
// window, only there to let the workers park) is still a pause count.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace roundtrip {

using Clock = std::chrono::steady_clock;

inline void spin_wait(int iterations) {
  for (int i = 0; i < iterations; ++i) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }
}

/// Keeps the thread busy until `ns` nanoseconds of steady_clock have passed (one vDSO clock
/// read, a few tens of ns, is the granularity).
inline void busy_for(std::int64_t ns) {
  const auto end = Clock::now() + std::chrono::nanoseconds(ns);
  while (Clock::now() < end) {
  }
}

constexpr std::int64_t kTailNs = 1'000;
constexpr int kGapSpins = 20'000;
constexpr std::int64_t kChunk = 20'000;
constexpr auto kChunkedDuration = std::chrono::seconds(10);

struct Config {
  std::string mode = "exit";
  bool housekeeping = false;
  int gap = 0;
  std::int64_t warmup = 20'000;
  std::int64_t requests = 200'000;
  bool chunked = false;
  int threads = 0;                 // 0: the CPUs available
  std::int64_t tail_ns = kTailNs;  // housekeeping tail, steady_clock nanoseconds
  bool per_worker_parking = false;
  const char* label = "reply, then exit        ";
};

inline std::string thousands(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

/// Measured cost of one pause iteration, to put the housekeeping tail in nanoseconds.
inline double pause_ns() {
  constexpr int kPauses = 2'000'000;
  const auto start = Clock::now();
  spin_wait(kPauses);
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kPauses;
}

[[noreturn]] inline void usage(const char* program, const char* problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s exit|housekeeping|spaced [WARMUP] [REQUESTS] [--chunked] "
               "[--threads N] [--tail-ns N] [--per-worker-parking]\n",
               program, problem, program);
  std::exit(2);
}

inline std::int64_t parse_count(const char* program, const char* text) {
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0) usage(program, "counts must be non-negative integers");
  return v;
}

inline Config parse(int argc, char** argv) {
  Config c;
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--chunked") {
      c.chunked = true;
    } else if (a == "--pause-ns") {
      std::printf("%.1f\n", pause_ns());
      std::exit(0);
    } else if (a == "--per-worker-parking") {
      c.per_worker_parking = true;
    } else if (a == "--tail") {
      usage(argv[0], "--tail (pause iterations) was replaced by --tail-ns (nanoseconds)");
    } else if (a == "--tail-ns" && i + 1 < argc) {
      c.tail_ns = parse_count(argv[0], argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      c.threads = static_cast<int>(parse_count(argv[0], argv[++i]));
      if (c.threads <= 0) usage(argv[0], "--threads must be at least 1");
    } else if (positional == 0) {
      c.mode = a;
      ++positional;
    } else if (positional == 1) {
      c.warmup = parse_count(argv[0], argv[i]);
      ++positional;
    } else if (positional == 2) {
      c.requests = parse_count(argv[0], argv[i]);
      ++positional;
    } else {
      usage(argv[0], "too many arguments");
    }
  }
  if (c.mode == "housekeeping") {
    c.housekeeping = true;
    c.label = "reply, then housekeeping";
  } else if (c.mode == "spaced") {
    c.gap = kGapSpins;
    c.label = "spaced lone requests    ";
    if (positional < 3) c.requests = 50'000;
  } else if (c.mode != "exit") {
    usage(argv[0], "unknown mode");
  }
  if (c.chunked) c.warmup = 0;
  if (c.threads == 0) {
    unsigned n = std::thread::hardware_concurrency();
    c.threads = n == 0 ? 1 : static_cast<int>(n);
  }
  return c;
}

/// The client side of the benchmark: what runs when a reply arrives. Not thread-safe by
/// itself; the round trips are strictly sequential, each handing over to the next through the
/// pool's queues (which order the accesses).
class Client {
 public:
  explicit Client(const Config& c) : config_(c), run_start_(Clock::now()) {}

  /// Called by the continuation; returns false when the run is over.
  bool on_reply() {
    const auto now = Clock::now();
    if (done_ >= config_.warmup) {
      ticks_ += now - t0_;
      ++timed_;
      if (config_.chunked && timed_ % kChunk == 0) {
        const double ns = std::chrono::duration<double, std::nano>(ticks_ - chunk_ticks_).count();
        const double at = std::chrono::duration<double>(now - run_start_).count();
        std::printf("%s | %s | chunk %5s | at %5.2f s | %5.0f ns/request\n", runtime_,
                    config_.label, thousands(timed_ / kChunk).c_str(), at, ns / kChunk);
        chunk_ticks_ = ticks_;
        if (now - run_start_ >= kChunkedDuration) return false;
      }
    }
    ++done_;
    if (!config_.chunked && done_ >= config_.warmup + config_.requests) return false;
    if (config_.gap > 0) spin_wait(config_.gap);
    t0_ = Clock::now();
    return true;
  }

  /// Called once before the first request.
  void start() {
    t0_ = Clock::now();
    run_start_ = t0_;
  }

  void report() const {
    const char* runtime = runtime_;
    const double ns = std::chrono::duration<double, std::nano>(ticks_).count();
    if (config_.chunked) {
      std::printf("%s | %s | requests completed in %.1f s | %s\n", runtime, config_.label,
                  std::chrono::duration<double>(Clock::now() - run_start_).count(),
                  thousands(timed_).c_str());
    } else {
      std::printf("%s | %s | warmup %7s | %5.0f ns/request\n", runtime, config_.label,
                  thousands(config_.warmup).c_str(),
                  timed_ > 0 ? ns / static_cast<double>(timed_) : 0.0);
    }
  }
  void set_runtime(const char* runtime) { runtime_ = runtime; }

 private:
  const Config& config_;
  std::int64_t done_ = 0;
  std::int64_t timed_ = 0;
  Clock::duration ticks_{};
  Clock::duration chunk_ticks_{};
  Clock::time_point t0_{};
  Clock::time_point run_start_;
  const char* runtime_ = "";
};

}  // namespace roundtrip
