// The driver perf/lines (arbor) and perf/baselines/asio_lines (Boost.Asio) share: a feeder
// thread writes LINES lines of LINE_BYTES bytes (the '\n' included) to the program's
// listener on 127.0.0.1 through a blocking socket, as fast as the kernel takes them; the
// program reads them one line at a time and reports lines/s from the first byte to the end of
// the stream, and the heap allocations made meanwhile (operator new is counted here, so this
// header is included by exactly one file of each program).
//
//   <program> [MODE] [LINES] [LINE_BYTES]      (defaults: its first mode, 2000000, 32)
//
// Output, one line: "<runtime> <mode> | <lines/s> lines/s | <MB/s> MB/s | <a> allocs/line".
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace lines {

inline std::atomic<unsigned long long> allocations{0};

struct Config {
  std::string mode;
  long lines = 2'000'000;
  int line_bytes = 32;
};

inline Config parse(int argc, char** argv, const char* default_mode) {
  Config c;
  c.mode = argc > 1 ? argv[1] : default_mode;
  if (argc > 2) c.lines = std::atol(argv[2]);
  if (argc > 3) c.line_bytes = std::atoi(argv[3]);
  if (c.lines <= 0 || c.line_bytes < 2) {
    std::fprintf(stderr, "usage: %s [MODE] [LINES] [LINE_BYTES>=2]\n", argv[0]);
    std::exit(2);
  }
  return c;
}

/// Connects to 127.0.0.1:port and writes config.lines lines, then closes: the end of stream
/// ends the reader's loop.
class Feeder {
 public:
  Feeder(const Config& config, int port) : thread_([config, port] { run(config, port); }) {}
  ~Feeder() { thread_.join(); }

 private:
  static void run(Config config, int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      std::perror("feeder: connect");
      std::exit(1);
    }
    // A block of whole lines, written over and over; the last write is cut to the count.
    constexpr long kBlockLines = 2048;
    std::string line(static_cast<std::size_t>(config.line_bytes - 1), 'x');
    line += '\n';
    std::string block;
    for (long i = 0; i < kBlockLines; ++i)
      block += line;
    for (long left = config.lines; left > 0;) {
      const long n = left < kBlockLines ? left : kBlockLines;
      std::size_t bytes = static_cast<std::size_t>(n) * line.size();
      const char* p = block.data();
      while (bytes > 0) {
        const ssize_t w = ::send(fd, p, bytes, MSG_NOSIGNAL);
        if (w <= 0) {
          std::perror("feeder: send");
          std::exit(1);
        }
        p += w;
        bytes -= static_cast<std::size_t>(w);
      }
      left -= n;
    }
    ::close(fd);
  }
  std::thread thread_;
};

/// Counts lines and bytes as the program reads them, and prints the report line.
class Meter {
 public:
  explicit Meter(const Config& c) : config_(c) {}
  void start() {
    start_ = std::chrono::steady_clock::now();
    allocations_at_start_ = allocations.load(std::memory_order_relaxed);
  }
  void line(std::size_t length) {
    ++lines_;
    bytes_ += length;
  }
  /// Prints the report; false (and a message) if the lines read are not the lines sent.
  bool report(const char* runtime) const {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const unsigned long long allocs =
        allocations.load(std::memory_order_relaxed) - allocations_at_start_;
    const auto expected = static_cast<unsigned long long>(config_.lines) *
                          static_cast<unsigned long long>(config_.line_bytes - 1);
    if (lines_ != static_cast<unsigned long long>(config_.lines) || bytes_ != expected) {
      std::fprintf(stderr, "%s %s: read %llu lines, %llu bytes; expected %ld, %llu\n", runtime,
                   config_.mode.c_str(), lines_, bytes_, config_.lines, expected);
      return false;
    }
    std::printf("%s %s | %.0f lines/s | %.1f MB/s | %.4f allocs/line\n", runtime,
                config_.mode.c_str(), static_cast<double>(lines_) / s,
                static_cast<double>(lines_) * config_.line_bytes / s / 1e6,
                static_cast<double>(allocs) / static_cast<double>(lines_));
    return true;
  }

 private:
  Config config_;
  std::chrono::steady_clock::time_point start_;
  unsigned long long allocations_at_start_ = 0;
  unsigned long long lines_ = 0;
  unsigned long long bytes_ = 0;  // without the '\n's
};

}  // namespace lines

// Every heap allocation in the program, counted (a matched malloc/free pair).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  lines::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
