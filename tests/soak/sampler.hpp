// The soak's sampler: every interval one row of the server's resources (from /proc/PID: RSS,
// descriptors, threads, CPU time), the client-side counters and a few of the server's own
// /metrics figures, appended to a CSV file (flushed per row, so a killed run keeps its rows)
// and echoed as one line to stdout. It only observes: a /metrics scrape that fails is a client
// error like any other, and nothing else it sees fails the run (main does the judging).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "soak.hpp"

namespace arbor::soak {

/// A process's resources, from /proc/PID. ok is false once the process is gone.
struct ProcSample {
  bool ok = false;
  long rss_kb = 0;     // VmRSS
  int threads = 0;     // Threads
  int fds = 0;         // entries of /proc/PID/fd
  double cpu_s = 0.0;  // utime + stime
};
ProcSample read_proc(pid_t pid);

/// GET /metrics on a connection of its own (closed before it returns): each sample line's
/// name and value, or nullopt if the request failed.
std::optional<std::map<std::string, double>> scrape_metrics(int port);

struct Row {
  double elapsed_s = 0;
  ProcSample proc;
  double cpu_pct = 0;  // of one CPU, since the previous row
  std::uint64_t requests = 0, errors = 0, uploads = 0, upload_bytes = 0, slowloris_cuts = 0,
                idle_expiries = 0, resets = 0, connections = 0;
  double srv_connections = -1, srv_requests = -1, srv_timeouts = -1, srv_buffers_lent = -1;
};

class Sampler {
 public:
  /// Writes the CSV header to `csv` (nullptr: no file) and takes the first row at once.
  Sampler(Context& ctx, pid_t pid, std::FILE* csv, Millis interval);
  ~Sampler() { stop(); }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  /// Takes one row now (also while the thread runs; rows are appended in time order).
  Row sample();
  /// Samples every interval on a thread until stop(), which takes a last row.
  void start();
  void stop();
  std::vector<Row> rows() const;

 private:
  Context& ctx_;
  pid_t pid_;
  std::FILE* csv_;
  Millis interval_;
  Clock::time_point start_ = Clock::now();
  mutable std::mutex mutex_;  // guards rows_, the file and the stop flag
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<Row> rows_;
  std::thread thread_;
};

}  // namespace arbor::soak
