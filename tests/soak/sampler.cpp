// The sampler's reading of /proc and /metrics, and its thread (sampler.hpp says what it keeps).
#include "sampler.hpp"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace arbor::soak {

ProcSample read_proc(pid_t pid) {
  ProcSample s;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::stol(line.substr(6));
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
  }
  // /proc/PID/stat: "pid (comm) state ..." with utime and stime the 14th and 15th fields; comm
  // may hold spaces, so count from its closing parenthesis.
  std::ifstream stat_file(dir + "/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || s.rss_kb == 0) return s;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  DIR* fd_dir = ::opendir((dir + "/fd").c_str());
  if (fd_dir == nullptr) return s;
  while (const dirent* e = ::readdir(fd_dir))
    if (e->d_name[0] != '.') ++s.fds;
  ::closedir(fd_dir);
  s.ok = true;
  return s;
}

std::optional<std::map<std::string, double>> scrape_metrics(int port) {
  Client c(port);
  if (!c.connected() || !c.send("GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n")) return std::nullopt;
  const Response r = c.read_response();
  if (r.status != 200) return std::nullopt;
  std::map<std::string, double> values;
  std::istringstream lines(r.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.find(' ');
    if (space != std::string::npos) values[line.substr(0, space)] = std::stod(line.substr(space));
  }
  return values;
}

Sampler::Sampler(Context& ctx, pid_t pid, std::FILE* csv, Millis interval)
    : ctx_(ctx), pid_(pid), csv_(csv), interval_(interval) {
  if (csv_ != nullptr) {
    std::fprintf(csv_,
                 "elapsed_s,rss_kb,fds,threads,cpu_s,cpu_pct,requests,errors,uploads,"
                 "upload_mib,slowloris_cuts,idle_expiries,resets,connections_opened,"
                 "srv_connections,srv_requests_total,srv_timeouts_total,srv_buffers_lent\n");
    std::fflush(csv_);
  }
  sample();
}

Row Sampler::sample() {
  Row row;
  row.elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
  row.proc = read_proc(pid_);
  auto& k = ctx_.counters;
  row.requests = Counters::get(k.requests);
  row.uploads = Counters::get(k.uploads);
  row.upload_bytes = Counters::get(k.upload_bytes);
  row.slowloris_cuts = Counters::get(k.slowloris_cuts);
  row.idle_expiries = Counters::get(k.idle_expiries);
  row.resets = Counters::get(k.resets);
  row.connections = Counters::get(k.connections);
  if (row.proc.ok) {
    if (auto m = scrape_metrics(ctx_.port)) {
      row.srv_connections = (*m)["arbor_http_connections"];
      row.srv_requests = (*m)["arbor_http_requests_total"];
      row.srv_timeouts = (*m)["arbor_http_timeouts_total"];
      row.srv_buffers_lent = (*m)["arbor_http_buffers_lent"];
    } else {
      ctx_.errors.fail("sampler", "GET /metrics failed");
    }
  }
  row.errors = ctx_.errors.count();
  std::lock_guard lock(mutex_);
  if (!rows_.empty()) {
    const Row& last = rows_.back();
    const double dt = row.elapsed_s - last.elapsed_s;
    if (dt > 0) row.cpu_pct = 100.0 * (row.proc.cpu_s - last.proc.cpu_s) / dt;
  }
  rows_.push_back(row);
  const double mib = static_cast<double>(row.upload_bytes) / (1 << 20);
  if (csv_ != nullptr) {
    std::fprintf(
        csv_,
        "%.1f,%ld,%d,%d,%.2f,%.1f,%llu,%llu,%llu,%.1f,%llu,%llu,%llu,%llu,%.0f,%.0f,%.0f,%.0f\n",
        row.elapsed_s, row.proc.rss_kb, row.proc.fds, row.proc.threads, row.proc.cpu_s, row.cpu_pct,
        static_cast<unsigned long long>(row.requests), static_cast<unsigned long long>(row.errors),
        static_cast<unsigned long long>(row.uploads), mib,
        static_cast<unsigned long long>(row.slowloris_cuts),
        static_cast<unsigned long long>(row.idle_expiries),
        static_cast<unsigned long long>(row.resets),
        static_cast<unsigned long long>(row.connections), row.srv_connections, row.srv_requests,
        row.srv_timeouts, row.srv_buffers_lent);
    std::fflush(csv_);
  }
  std::printf(
      "soak: %6.0f s  rss %6ld kB  fds %5d  threads %2d  cpu %5.1f%%  requests %10llu  "
      "errors %llu  uploads %llu (%.0f MiB)  cuts %llu  expiries %llu  resets %llu  "
      "server connections %.0f\n",
      row.elapsed_s, row.proc.rss_kb, row.proc.fds, row.proc.threads, row.cpu_pct,
      static_cast<unsigned long long>(row.requests), static_cast<unsigned long long>(row.errors),
      static_cast<unsigned long long>(row.uploads), mib,
      static_cast<unsigned long long>(row.slowloris_cuts),
      static_cast<unsigned long long>(row.idle_expiries),
      static_cast<unsigned long long>(row.resets), row.srv_connections);
  std::fflush(stdout);
  return row;
}

void Sampler::start() {
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    // On a fixed schedule (a row at every multiple of the interval, however long one takes),
    // waiting on the condition variable, not a sleep: stop() ends the wait at once.
    for (auto next = start_ + interval_;; next += interval_) {
      if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
      lock.unlock();
      sample();
      lock.lock();
    }
  });
}

void Sampler::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  sample();
}

std::vector<Row> Sampler::rows() const {
  std::lock_guard lock(mutex_);
  return rows_;
}

}  // namespace arbor::soak
